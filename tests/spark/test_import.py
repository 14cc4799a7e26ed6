"""Importing rill.client.spark leaves the process alone; making a session sets what Spark needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

SPARK_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")


def test_importing_rill_client_spark_changes_no_environment_variable() -> None:
    code = ("import json, os; before = dict(os.environ); import rill.client.spark; after = dict(os.environ); "
            "print(json.dumps({k: [before.get(k), after.get(k)] for k in before.keys() | after.keys() "
            "if before.get(k) != after.get(k)}))")
    env = {k: v for k, v in os.environ.items() if k not in SPARK_VARIABLES}  # unset, so a setdefault would show
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env,
                         timeout=120).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {}


def test_a_session_runs_its_workers_on_this_interpreter(spark: Any) -> None:
    """spark_session sets PYSPARK_PYTHON (unless set) and spark.pyspark.python when it makes the session."""
    assert "PYSPARK_PYTHON" in os.environ
    assert os.path.realpath(spark.sparkContext.pythonExec) == os.path.realpath(sys.executable)
