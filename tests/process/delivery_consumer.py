"""One consumer of the delivery harness (tests/process/test_delivery.py), run as a process.

``python delivery_consumer.py BOOTSTRAP GROUP TOPIC OUT_FILE``: joins GROUP, and for
every poll() writes one line per message, ``M <partition> <number> <offset>``, to
OUT_FILE (unbuffered: a kill -9 loses nothing written), then commits. Auto-commit
is off, so an offset is committed only after its message was recorded: at-least-once.
``A <partitions>`` marks each new assignment, ``E`` an eviction, ``C <code>`` a
refused commit. SIGTERM closes the consumer cleanly.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from rill.client.consumer import CommitFailed, Consumer, MemberEvicted, TopicPartition


def main() -> None:
    bootstrap, group, topic, out_path = sys.argv[1:5]
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def on_assign(partitions: list[TopicPartition]) -> None:
        os.write(fd, ("A " + " ".join(str(tp.partition) for tp in partitions) + "\n").encode())

    consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        session_timeout_ms=1500, heartbeat_interval_ms=200, max_poll_records=50,
                        fetch_max_wait_ms=100, on_assign=on_assign)
    consumer.add_topic(topic)
    while not stopping:
        try:
            messages = consumer.poll(0.1)
        except MemberEvicted:
            os.write(fd, b"E\n")
            continue
        if not messages:
            continue
        os.write(fd, "".join(f"M {m.partition} {int(m.value)} {m.offset}\n" for m in messages).encode())
        time.sleep(0.02)  # "processing": a kill often lands between recording and committing
        try:
            consumer.commit()
        except CommitFailed as exc:
            os.write(fd, f"C {exc.code_name}\n".encode())
    consumer.close()
    os.close(fd)


if __name__ == "__main__":
    main()
