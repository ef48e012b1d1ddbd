-- Transactions (docs/design/transactions.md, "Tables").
--
-- Ownership of each transactional id: a lease with an owner epoch, as
-- strata_groups keeps for groups, in a table of its own so that a group and
-- a transactional id of one name are different keys. A row is never
-- deleted, so the owner epoch (the coordinator epoch markers carry) only
-- grows.
CREATE TABLE IF NOT EXISTS strata_txn_owners (
    transactional_id TEXT PRIMARY KEY,
    owner_id         TEXT    NOT NULL DEFAULT '',
    owner_address    TEXT    NOT NULL DEFAULT '',
    owner_epoch      BIGINT  NOT NULL DEFAULT 0,
    lease_expires_ms BIGINT  NOT NULL DEFAULT 0
);

-- One row per transactional id: the producer id and epoch it hands out,
-- the ones before the last bump (KIP-360 retries; -1 when none), the state
-- (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
-- CompleteAbort), transaction.timeout.ms, when the current transaction
-- became Ongoing (-1 when none has) and when the row last changed.
CREATE TABLE IF NOT EXISTS strata_txn_state (
    transactional_id    TEXT PRIMARY KEY,
    producer_id         BIGINT   NOT NULL,
    producer_epoch      SMALLINT NOT NULL,
    last_producer_id    BIGINT   NOT NULL DEFAULT -1,
    last_producer_epoch SMALLINT NOT NULL DEFAULT -1,
    state               TEXT     NOT NULL,
    timeout_ms          INTEGER  NOT NULL,
    started_ms          BIGINT   NOT NULL DEFAULT -1,
    updated_ms          BIGINT   NOT NULL
);

-- The partitions of the current transaction; in PrepareCommit and
-- PrepareAbort, those whose marker is still to be written.
CREATE TABLE IF NOT EXISTS strata_txn_partitions (
    transactional_id TEXT    NOT NULL,
    topic            TEXT    NOT NULL,
    partition_index  INTEGER NOT NULL,
    PRIMARY KEY (transactional_id, topic, partition_index)
);

-- The groups whose offsets the current transaction commits.
CREATE TABLE IF NOT EXISTS strata_txn_groups (
    transactional_id TEXT NOT NULL,
    group_id         TEXT NOT NULL,
    PRIMARY KEY (transactional_id, group_id)
);

-- Offsets staged by TxnOffsetCommit: moved into strata_offsets by the
-- database transaction that records PrepareCommit, deleted by the one that
-- records PrepareAbort.
CREATE TABLE IF NOT EXISTS strata_txn_pending_offsets (
    transactional_id TEXT    NOT NULL,
    group_id         TEXT    NOT NULL,
    topic            TEXT    NOT NULL,
    partition_index  INTEGER NOT NULL,
    committed_offset BIGINT  NOT NULL,
    leader_epoch     INTEGER NOT NULL,
    metadata         TEXT    NOT NULL,
    commit_time_ms   BIGINT  NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic, partition_index)
);
