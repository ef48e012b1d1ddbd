-- Groups: ownership lease (owner id, address, epoch, expiry) and the group's
-- state as the owning coordinator last saved it. A row is never deleted, so
-- the owner epoch only grows, even across DeleteGroup.
CREATE TABLE IF NOT EXISTS strata_groups (
    group_id         TEXT PRIMARY KEY,
    owner_id         TEXT    NOT NULL DEFAULT '',
    owner_address    TEXT    NOT NULL DEFAULT '',
    owner_epoch      BIGINT  NOT NULL DEFAULT 0,
    lease_expires_ms BIGINT  NOT NULL DEFAULT 0,
    has_state        INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'empty',
    member_count     INTEGER NOT NULL DEFAULT 0,
    data             BLOB,
    updated_ms       BIGINT  NOT NULL DEFAULT 0
);

-- Committed offsets, one row per group and partition.
CREATE TABLE IF NOT EXISTS strata_offsets (
    group_id         TEXT    NOT NULL,
    topic            TEXT    NOT NULL,
    partition_index  INTEGER NOT NULL,
    committed_offset BIGINT  NOT NULL,
    leader_epoch     INTEGER NOT NULL,
    metadata         TEXT    NOT NULL,
    commit_time_ms   BIGINT  NOT NULL,
    PRIMARY KEY (group_id, topic, partition_index)
);
