"""Scraping a broker's ``/metrics`` as Prometheus does, for ``rill perf metrics`` and ``rill perf scrape``.

:func:`scrape` is one HTTP GET timed from the request to the body's last byte;
:class:`IntervalScraper` scrapes on a thread of its own every ``interval`` seconds of the
time a benchmark runs against the broker (its clock stops between runs, so a run of any
length sees scrapes at Prometheus's rate, never more).
"""

from __future__ import annotations

import gzip
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = ["IntervalScraper", "Scrape", "scrape", "series_count"]


class Scrape(NamedTuple):
    """One scrape: ``seconds`` from the request to the last byte, the ``text`` (decompressed when it came
    gzipped) and ``wire_bytes`` as sent (the gzipped size when gzipped)."""

    seconds: float
    text: bytes
    wire_bytes: int
    started: float  # time.monotonic() when the request began


def scrape(port: int, *, gzipped: bool = False, timeout: float = 120.0) -> Scrape:
    """GET ``http://127.0.0.1:PORT/metrics`` (asking for gzip when ``gzipped``).

    Raises:
        OSError: the broker did not answer (urllib's URLError is one) or answered with an error status.
    """
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Accept-Encoding": "gzip"} if gzipped else {})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        encoding = response.headers.get("Content-Encoding")
    seconds = time.monotonic() - started
    return Scrape(seconds, gzip.decompress(body) if encoding == "gzip" else body, len(body), started)


def series_count(text: bytes) -> int:
    """Samples in an exposition (its lines that are neither comments nor blank)."""
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


class IntervalScraper:
    """Scrapes ``port`` every ``interval`` seconds of benchmark time, on a daemon thread.

    Enter :meth:`during` around each run; the clock runs only inside it (a scrape under way
    when a run ends is finished, and counted in the run it began in). Not thread-safe
    beyond that: one run at a time. ``seconds`` holds every scrape's duration.
    """

    def __init__(self, port: int, interval: float) -> None:
        self.port = port
        self.interval = interval
        self.seconds: list[float] = []
        self.series = 0  # in the last scrape
        self.text_bytes = 0
        self.error: BaseException | None = None
        self._running = threading.Event()
        self._idle = threading.Event()  # set whenever no scrape is under way
        self._idle.set()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="interval-scraper", daemon=True)
        self._thread.start()

    @contextmanager
    def during(self) -> Iterator[dict[str, Any]]:
        """Around one run: yields a dict that holds, once the block exits, ``scrapes`` (how many began in
        the run) and ``scrape_s`` (their durations). Raises what a scrape raised."""
        found: dict[str, Any] = {}
        before = len(self.seconds)
        self._running.set()
        try:
            yield found
        finally:
            self._running.clear()
            self._idle.wait(300)
            found["scrapes"] = len(self.seconds) - before
            found["scrape_s"] = [round(s, 4) for s in self.seconds[before:]]
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._closed.set()
        self._running.set()  # wake the thread to see it
        self._thread.join(300)

    def _run(self) -> None:
        elapsed, last = 0.0, time.monotonic()
        while not self._closed.is_set():
            if not self._running.wait(0.1):
                last = time.monotonic()  # between runs the clock stops
                continue
            now = time.monotonic()
            elapsed, last = elapsed + now - last, now
            if elapsed < self.interval:
                self._closed.wait(min(0.02, self.interval - elapsed))
                continue
            elapsed -= self.interval
            self._idle.clear()
            try:
                if self._running.is_set() and not self._closed.is_set():
                    done = scrape(self.port)
                    self.seconds.append(done.seconds)
                    self.series, self.text_bytes = series_count(done.text), len(done.text)
            except BaseException as exc:  # reported by during()
                self.error = exc
                return
            finally:
                self._idle.set()
