"""The ``rill`` PySpark data source: ``spark.read.format("rill")`` and friends.

Spark constructs :class:`RillDataSource` with the query's options (a case-insensitive
map of strings) wherever it needs it, on the driver and in executors; each method
parses what it uses, so bad options fail at planning time (see rill.client.spark.options).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.datasource import DataSourceWriter
from pyspark.sql.types import StructType

from rill.client.spark.arrow_read import SCHEMA_DDL
from rill.client.spark.batch import RillBatchReader
from rill.client.spark.options import SourceOptionError, parse_read_options, parse_write_options
from rill.client.spark.stream import RillStreamReader
from rill.client.spark.worker_log import worker_logging
from rill.client.spark.write import RillStreamWriter, RillWriter, check_write_schema

__all__ = ["RillDataSource", "SOURCE_NAME"]

SOURCE_NAME = "rill"


class RillDataSource(DataSource):
    """Topics of a rill broker as a table: batch and streaming reads, batch and streaming writes."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        worker_logging()
        return RillBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        worker_logging()
        return RillStreamReader(parse_read_options(self.options, streaming=True))

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
