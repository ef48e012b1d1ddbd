#!/usr/bin/python3
"""librdkafka's transactional producer, through Debian's
python3-confluent-kafka, against a Kafka listener: tests/kafka_librdkafka_txn_test.go
runs it and checks what it prints.

Usage: txnproducer.py BOOTSTRAP TOPIC IN_TOPIC GROUP

TOPIC has two partitions, IN_TOPIC one (with at least one record in it).
The script:

  1. commits a transaction of c0 (partition 0) and c1 (partition 1),
     aborts one of a0 and a1, and commits one of c2 and c3;
  2. reads TOPIC from the start with isolation.level read_committed until
     it has c2 and c3 (each the last committed record of its partition, so
     an aborted record not dropped would have come before), and with
     read_uncommitted until it has all six;
  3. joins GROUP on IN_TOPIC, then in one transaction sends the group's
     offset 3 for IN_TOPIC/0 with send_offsets_to_transaction and aborts,
     and in the next sends offset 5 and commits, reading the group's
     committed offset after each.

It prints one JSON object on stdout and exits 0:

  {"read_committed": [...], "read_uncommitted": [...],
   "offset_after_abort": -1001, "offset_after_commit": 5}

Any error is raised: a traceback on stderr and a non-zero exit. Every wait
is for a condition, bounded by a deadline.
"""

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

DEADLINE_SECONDS = 60


def read(bootstrap, topic, isolation, want):
    """Reads TOPIC's two partitions from the start until every value in want is seen."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "unused-" + isolation,
        "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    seen = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not want.issubset(seen):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{isolation}: read {seen}, still waiting for {sorted(want - set(seen))}")
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        seen.append(msg.value().decode())
    c.close()
    return sorted(seen)


def main():
    bootstrap, topic, in_topic, group = sys.argv[1:5]
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": "rdkafka-txn",
        "transaction.timeout.ms": 30000,
    })
    p.init_transactions(DEADLINE_SECONDS)

    def transaction(values, commit, offsets=None, consumer=None):
        p.begin_transaction()
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % 2)
        if offsets is not None:
            p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), DEADLINE_SECONDS)
        if commit:
            p.commit_transaction(DEADLINE_SECONDS)
        else:
            # abort_transaction purges what is still queued: flush first,
            # so the aborted records are in the log for read_uncommitted.
            if p.flush(DEADLINE_SECONDS) != 0:
                raise RuntimeError("records still queued after flush")
            p.abort_transaction(DEADLINE_SECONDS)

    transaction(["c0", "c1"], True)
    transaction(["a0", "a1"], False)
    transaction(["c2", "c3"], True)
    out = {
        "read_committed": read(bootstrap, topic, "read_committed", {"c2", "c3"}),
        "read_uncommitted": read(bootstrap, topic, "read_uncommitted", {"c0", "c1", "a0", "a1", "c2", "c3"}),
    }

    # A member of GROUP, as a consume-transform-produce loop would have:
    # send_offsets_to_transaction carries its member id and generation.
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    c.subscribe([in_topic])
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no record of {in_topic} read in group {group}")
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        break

    def committed():
        [tp] = c.committed([TopicPartition(in_topic, 0)], DEADLINE_SECONDS)
        if tp.error:
            raise KafkaException(tp.error)
        return tp.offset

    transaction(["o0"], False, [TopicPartition(in_topic, 0, 3)], c)
    out["offset_after_abort"] = committed()
    transaction(["o1"], True, [TopicPartition(in_topic, 0, 5)], c)
    out["offset_after_commit"] = committed()
    c.close()
    p.flush(DEADLINE_SECONDS)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
