#!/usr/bin/python3
"""One member of a Kafka consumer group, run by librdkafka through Debian's
python3-confluent-kafka, with the cooperative-sticky assignor and a slow
revocation: tests/kafka_coop_test.go runs two of them.

Usage: coopmember.py BOOTSTRAP GROUP TOPIC REVOKE_SECONDS

Offsets are never committed automatically: the member commits the position
of each partition it gives up, in its revoke callback, after waiting
REVOKE_SECONDS (a member finishing its work before it lets go). It prints
one JSON object per line on stdout, and runs until it is killed:

  {"event": "assigned", "partitions": [0, 1]}
  {"event": "revoking", "partitions": [1]}
  {"event": "committed", "partitions": [{"partition": 1, "offset": 100, "error": null}]}
  {"event": "commit_failed", "error": "..."}
  {"event": "record", "partition": 0, "offset": 5, "value": "17"}
  {"event": "error", "error": "..."}
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException


def say(**event):
    print(json.dumps(event), flush=True)


def main():
    bootstrap, group, topic, revoke_seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 30000,
    })

    def on_assign(c, parts):
        say(event="assigned", partitions=sorted(p.partition for p in parts))

    def on_revoke(c, parts):
        say(event="revoking", partitions=sorted(p.partition for p in parts))
        time.sleep(revoke_seconds)
        positions = [p for p in c.position(parts) if p.offset >= 0]
        if not positions:
            say(event="committed", partitions=[])
            return
        try:
            done = c.commit(offsets=positions, asynchronous=False)
        except KafkaException as e:
            say(event="commit_failed", error=str(e))
            return
        say(event="committed", partitions=[
            {"partition": p.partition, "offset": p.offset, "error": str(p.error) if p.error else None}
            for p in done])

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            say(event="error", error=str(msg.error()))
            continue
        say(event="record", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())


if __name__ == "__main__":
    main()
