"""One local SparkSession for every audit test of the session (a JVM start costs ~10 s here).

``local[2]``, no UI, few shuffle partitions: the frames in these tests are tiny. Spark needs Java;
``scripts/bootstrap.sh`` (make env) installs it when missing, so a missing Java fails loudly here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from scm_audit.job import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = spark_session("local[2]", app_name="scm-audit-tests", shuffle_partitions=2)
    # Tiny frames: adaptive re-planning and broadcast jobs cost more than they save here (the job
    # run through spark-submit, in the end-to-end test, keeps Spark's defaults for large inputs).
    session.conf.set("spark.sql.adaptive.enabled", "false")
    session.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        yield session
    finally:
        session.stop()
