"""A worker process for ``rill perf scrape``: small requests to a broker in a tight loop, each timed.

Run as ``python -m rill.client.cli.perf.loop_probe PORT TOPIC``. It asks for the log end
of ``TOPIC`` partition 0 (one OFFSETS request over one connection, through
rill.client.simple.SimpleConsumer) again and again, as fast as the broker answers, until
its stdin closes; then it prints one JSON object on stdout: ``{"samples": [[started,
seconds], ...]}``, ``started`` being ``time.monotonic()`` when a request was sent (the
clock is the machine's, so the parent compares it with its own) and ``seconds`` its
round trip. It runs in a process of its own so that the probe's own Python work does not
share a GIL with the scraper or the broker: its worst round trip is the broker's worst
stall (plus the scheduler's).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rill.client.simple import SimpleConsumer

__all__ = ["main"]


def main(argv: list[str]) -> int:
    port, topic = int(argv[0]), argv[1]
    closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the parent closed our stdin
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    samples: list[tuple[float, float]] = []
    with SimpleConsumer("127.0.0.1", port, timeout=60) as client:
        client.latest_offset(topic, 0)  # connected, and the first request out of the way
        print("ready", file=sys.stderr, flush=True)
        clock = time.monotonic
        while not closed.is_set():
            started = clock()
            client.latest_offset(topic, 0)
            samples.append((started, clock() - started))
    json.dump({"samples": [[round(t, 6), round(s, 7)] for t, s in samples]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
