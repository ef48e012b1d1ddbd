-- The protocol type of a classic group (Kafka's JoinGroup protocol type:
-- "consumer", "connect", "sr", ...), whose data is then the classic state
-- (generation, protocol, leader, members and their assignments); empty for
-- a KIP-848 group.
ALTER TABLE strata_groups ADD COLUMN protocol_type TEXT NOT NULL DEFAULT '';
