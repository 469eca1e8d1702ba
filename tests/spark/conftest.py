"""One local Spark for the whole session (spec/spark.md 7) and a node per module.

local[2,2]: two task threads and one retry per task (plain local[N] never retries, P9).
Workers run the test interpreter (PYSPARK_PYTHON) and import this checkout (PYTHONPATH set
before the JVM starts, P2). The JVM and its Python daemons live in this process's group
and are stopped at session end; nodes run in their own groups and are killed at teardown.
"""

from __future__ import annotations

import os
import sys

import pytest

from tools.testing.node_harness import Node, alive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    from pyspark.sql import SparkSession

    from topics_actors.spark import register
    session = (SparkSession.builder.master("local[2,2]")
               .appName("topics-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.extraJavaOptions",
                       "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("wh")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node shared by the tests of one module (each test uses its own topics)."""
    base = tmp_path_factory.mktemp("node")
    started = Node(str(base / "data"), shards=2, log_path=str(base / "node.log"))
    started.start()
    yield started
    pids = [child.pid for child in started.children()]
    started.stop()
    assert not alive(pids), "the node left processes behind"
