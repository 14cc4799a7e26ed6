"""The ``rill`` PySpark data source: ``spark.read.format("rill")`` and friends.

Spark constructs :class:`RillDataSource` with the query's options (a case-insensitive
map of strings) wherever it needs it, on the driver and in executors; each method
parses what it uses, so bad options fail at planning time (see rill.client.spark.options).

Where a bad read option fails: Spark asks for the schema at ``load()``, batch or stream,
so :meth:`RillDataSource.schema` checks every read option there (a read names
``subscribe``, ``subscribePattern`` or ``assign``; a write names none, and Spark asks a
write for no schema). What only a batch or only a stream refuses is known later: a batch
fails at its first action (``reader``), a stream at its first trigger. pyspark's stream
runner hides an exception raised by ``streamReader`` under an ``UnboundLocalError`` of its
own (its ``finally`` calls ``reader.stop()`` on a reader never made), so ``streamReader``
returns a :class:`_RefusedStream` that raises the one-line :class:`SourceOptionError` at
the first call instead.
"""

from __future__ import annotations

from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.datasource import DataSourceWriter
from pyspark.sql.types import StructType

from rill.client.spark.arrow_read import SCHEMA_DDL
from rill.client.spark.batch import RillBatchReader
from rill.client.spark.options import ReadOptions, SourceOptionError, parse_read_options, parse_write_options
from rill.client.spark.stream import RillStreamReader
from rill.client.spark.worker_log import worker_logging
from rill.client.spark.write import RillStreamWriter, RillWriter, check_write_schema

__all__ = ["RillDataSource", "SOURCE_NAME"]

SOURCE_NAME = "rill"
_READ_MARKERS = ("subscribe", "subscribePattern", "assign")


def _parsed(options: Any, streaming: bool | None) -> ReadOptions:
    """:func:`parse_read_options`, its error raised afresh here: the traceback Spark shows is then this frame
    and the one-line message, not the parser's frames."""
    try:
        return parse_read_options(options, streaming=streaming)
    except SourceOptionError as exc:
        raise SourceOptionError(str(exc)) from None


class _RefusedStream(DataSourceStreamReader):
    """A stream reader for options a stream refuses: every call raises the error (see the module doc)."""

    def __init__(self, error: SourceOptionError) -> None:
        self.error = error

    def _fail(self, *args: Any) -> NoReturn:
        raise SourceOptionError(str(self.error))

    initialOffset = latestOffset = partitions = commit = read = _fail  # type: ignore[assignment]


class RillDataSource(DataSource):
    """Topics of a rill broker as a table: batch and streaming reads, batch and streaming writes."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        """The columns; for a read, every option is checked first, so a bad one fails ``load()``."""
        if any(self.options.get(key) is not None for key in _READ_MARKERS):
            _parsed(self.options, None)
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        worker_logging()
        return RillBatchReader(_parsed(self.options, False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        worker_logging()
        try:
            return RillStreamReader(parse_read_options(self.options, streaming=True))
        except SourceOptionError as exc:
            return _RefusedStream(exc)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        worker_logging()
        if overwrite:
            raise SourceOptionError("a rill topic is an append-only log: use mode('append'), not overwrite")
        opts = parse_write_options(self.options)
        check_write_schema(opts, schema.fieldNames())
        return RillWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        worker_logging()
        opts = parse_write_options(self.options)
        check_write_schema(opts, schema.fieldNames())
        return RillStreamWriter(opts)
