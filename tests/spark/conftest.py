"""Shared fixtures for the Spark tests: ONE local SparkSession for the whole run.

Starting a session costs 10-25 s on this machine, so every Spark test shares
this one (local[2], no console progress). Workers run this interpreter
(PYSPARK_PYTHON), where pylog and pyarrow are installed.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest



@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'pylog-kafka[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'pylog-kafka[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):  # pragma: no cover - depends on the machine
        pytest.skip("Spark needs Java 17+ on PATH or JAVA_HOME")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import pylog.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pylog-tests")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pylog.spark.register(session)
    yield session
    session.stop()
