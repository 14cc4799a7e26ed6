"""The text exposition of the broker's registry, written for 30,000 series, and the HTTP server for it.

prometheus-client's ``generate_latest`` formats every sample afresh: it sorts and escapes
each label set by regular expression and formats each value, about 7 µs a sample, so a
broker with 10,000 partitions (some 33,000 series) spent a quarter of a second of CPU per
scrape holding the GIL, and the event loop, which must take the GIL back after each
``select`` and ``send``, slowed to a few hundred requests a second meanwhile
(docs/benchmarks.md, section 18). Here each label set's text is built once and kept
(:class:`LabelText`, bounded), values are formatted with ``repr``, and the writer gives the
GIL up every :data:`YIELD_EVERY` lines, so the event loop runs between chunks of a scrape
instead of waiting out the interpreter's switch interval. The output is Prometheus's text
format 0.0.4, as ``generate_latest`` writes it (counters named ``<name>_total``, no
``_created`` samples), and parses with prometheus-client's own parser (tests).

:class:`MetricsHttpServer` serves it at ``/metrics`` (any path, as prometheus-client's
server does) from a daemon thread, gzipped when the scraper accepts gzip.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

__all__ = ["CONTENT_TYPE", "LabelText", "MetricsHttpServer", "RowFamily", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
YIELD_EVERY = 200  # lines written between two GIL hand-overs to the event loop (about 0.5 ms of work)
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary",
          "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_SPECIAL = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    text = repr(float(value))
    return _SPECIAL.get(text, text)


class RowFamily(Metric):
    """A family of many series kept as rows of (label values, value), not as prometheus-client's ``Sample``
    objects: :func:`render` writes the rows with each label set's text cached; ``samples`` builds the
    ``Sample`` list on demand for any other reader (prometheus-client's own writer, tests)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], typ: str = "gauge") -> None:
        super().__init__(name, documentation, typ)
        self.labelnames = tuple(labels)
        self.rows: list[tuple[tuple[str, ...], float]] = []

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.rows.append((values, value))

    @property
    def samples(self) -> list[Sample]:
        return [Sample(self.name, dict(zip(self.labelnames, values)), value, None, None) for values, value in self.rows]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        """Metric.__init__ sets an empty list: the rows are the samples."""


class LabelText:
    """``{name="value",...}`` (names sorted, as prometheus-client writes them) of each label set seen,
    kept across scrapes (cleared past ``limit``)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._texts: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}

    def row(self, names: tuple[str, ...], values: tuple[str, ...]) -> str:
        key = (names, values)
        text = self._texts.get(key)
        if text is None:
            if len(self._texts) >= self.limit:
                self._texts.clear()
            text = self._texts[key] = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(names, values))) + "}"
        return text

    def __call__(self, labels: dict[str, str]) -> str:
        return self.row(tuple(labels), tuple(labels.values())) if labels else ""


def _lines(registry: CollectorRegistry, labels: LabelText) -> Iterable[str]:
    for metric in registry.collect():
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        if metric.type == "info":
            name = metric.name + "_info"
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        yield f"# HELP {name} {doc}\n# TYPE {name} {_TYPES.get(metric.type, 'untyped')}\n"
        if isinstance(metric, RowFamily):
            names, row = metric.labelnames, labels.row
            for values, value in metric.rows:
                yield f"{metric.name}{row(names, values)} {_number(value)}\n"
            continue
        created = metric.name + "_created"
        for sample in metric.samples:
            if sample.name == created:
                continue  # OpenMetrics' creation time: not part of the Prometheus text rill serves
            stamp = f" {int(float(sample.timestamp) * 1000)}" if sample.timestamp is not None else ""
            yield f"{sample.name}{labels(sample.labels)} {_number(sample.value)}{stamp}\n"


def render(registry: CollectorRegistry, labels: LabelText | None = None) -> bytes:
    """The exposition of ``registry`` (collectors run on the calling thread, which yields the GIL
    every :data:`YIELD_EVERY` lines)."""
    texts = labels if labels is not None else LabelText()
    out: list[str] = []
    for count, line in enumerate(_lines(registry, texts), 1):
        out.append(line)
        if count % YIELD_EVERY == 0:
            time.sleep(0)  # let the event loop run: it waits for the GIL after each of its system calls
    return "".join(out).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        try:
            body = render(self.server.registry, self.server.labels)
        except Exception as exc:  # a collector's bug: the scrape fails, the broker goes on
            self.send_error(500, f"collecting metrics failed: {exc}")
            return
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
        if gzipped:
            body = gzip.compress(body, compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not worth a log line each
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    labels: LabelText


class MetricsHttpServer:
    """Serves ``registry`` on ``host``:``port`` (0: a free port) from a daemon thread.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.registry = registry
        self._server.labels = LabelText()
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="rill-metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
