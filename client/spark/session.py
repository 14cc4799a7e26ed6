"""Registering the source, and a local SparkSession set up for it."""

from __future__ import annotations

import os
import sys
from typing import Any

import structlog

from rill.client.spark.source import RillDataSource

__all__ = ["register", "spark_session"]

log = structlog.get_logger(__name__)


def register(spark: Any) -> Any:
    """Register the ``rill`` data source with ``spark`` (a SparkSession) and return ``spark``.

    Warns (``spark.worker_python_mismatch``) when the session's Python workers run another
    interpreter than this one: they would fail to import pyarrow or rill.
    """
    configured = spark.sparkContext.pythonExec
    if configured and os.path.realpath(configured) != os.path.realpath(sys.executable):
        log.warning("spark.worker_python_mismatch", worker_python=configured, driver_python=sys.executable)
    spark.dataSource.register(RillDataSource)
    return spark


def spark_session(master: str = "local[2]", app_name: str = "rill", **conf: str) -> Any:
    """A SparkSession (created, or the running one) with the ``rill`` source registered.

    Workers use this interpreter (``spark.pyspark.python``, and ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` unless set); the UI is off and Spark binds to loopback
    unless the environment says otherwise (``SPARK_LOCAL_IP``). These environment
    variables are set here, for this process, when a session is made, not on import.
    ``conf`` entries are Spark settings (dots as in Spark: pass
    ``**{"spark.sql.shuffle.partitions": "4"}``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
