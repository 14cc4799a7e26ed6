"""rill.client.spark: the ``rill`` PySpark data source and the offline loader.

    from rill.client.spark import spark_session
    spark = spark_session()                      # local[2], with the source registered
    df = spark.read.format("rill").option("bootstrap", "localhost:9092").option("subscribe", "events").load()

or, with a session of your own, ``register(spark)``. See docs/spark.md.

Spark's Python workers must run this interpreter (they import pyarrow and rill).
:func:`spark_session` sees to it: it sets ``spark.pyspark.python`` and, unless already
set, ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to ``sys.executable`` before it
starts the session. Importing this package changes no environment variable; a session of
your own needs them set before it starts (:func:`register` warns when its workers run
another interpreter).
"""

from __future__ import annotations

from rill.client.spark.options import SourceOptionError
from rill.client.spark.session import register, spark_session
from rill.client.spark.source import SOURCE_NAME, RillDataSource

__all__ = ["RillDataSource", "SOURCE_NAME", "SourceOptionError", "register", "spark_session"]
