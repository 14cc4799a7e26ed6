"""rill.client.spark: the ``rill`` PySpark data source and the offline loader.

    from rill.client.spark import spark_session
    spark = spark_session()                      # local[2], with the source registered
    df = spark.read.format("rill").option("bootstrap", "localhost:9092").option("subscribe", "events").load()

or, with a session of your own, ``register(spark)``. See docs/spark.md.

Spark's Python workers must run this interpreter (they import pyarrow and rill). Importing
this package therefore sets ``PYSPARK_PYTHON`` to ``sys.executable`` unless it is already
set; it takes effect for a SparkContext started afterwards, and :func:`spark_session`
also sets ``spark.pyspark.python``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from rill.client.spark.options import SourceOptionError  # noqa: E402
from rill.client.spark.session import register, spark_session  # noqa: E402
from rill.client.spark.source import SOURCE_NAME, RillDataSource  # noqa: E402

__all__ = ["RillDataSource", "SOURCE_NAME", "SourceOptionError", "register", "spark_session"]
