"""Tiny hand-built export frames for the transform tests (columns of the export format + ``scm``)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from scm_audit.schema import spark_schema
from scm_server import audit_format as fmt

DEFAULTS: dict[str, dict[str, Any]] = {
    fmt.CONTAINERS: {
        "lifecycle_state": "CLOSED", "replication_type": "RATIS", "replication_factor": "THREE",
        "pipeline_id": "p1", "owner": "om", "sequence_id": 5, "used_bytes": 100, "number_of_keys": 10,
        "state_enter_time": 0, "delete_transaction_id": 0, "ec_replication": None,
    },
    fmt.REPLICAS: {
        "replica_state": "CLOSED", "bcsid": 5, "replica_index": 0, "used_bytes": 100, "key_count": 10,
        "origin_node_id": "", "is_empty": False, "last_report_ms": 0,
    },
    fmt.DATANODES: {
        "hostname": None, "ip_address": "127.0.0.1", "rack": "/r1", "health": "HEALTHY", "op_state": "IN_SERVICE",
        "op_state_expiry_s": 0, "last_heartbeat_ms": 0, "capacity": 0, "used": 0, "remaining": 0, "replica_count": 0,
        "first_report_ms": 1_700_000_000_001,
    },
    fmt.PIPELINES: {
        "pipeline_state": "PIPELINE_OPEN", "replication_type": "RATIS", "replication_factor": "THREE",
        "leader_id": "", "members": [], "creation_time_ms": 0,
    },
    fmt.RM_VERDICTS: {"states": None, "reason": ""},
}


def frame(spark: SparkSession, table: str, rows: list[dict[str, Any]], scm: str = "scm1") -> DataFrame:
    schema = spark_schema(table)
    full = T.StructType([*schema.fields, T.StructField("scm", T.StringType())])
    data = []
    for row in rows:
        merged = {"scm_id": f"id-{scm}", "cluster_id": "CID-test", "applied_index": 7, **DEFAULTS[table], "scm": scm, **row}
        if table == fmt.DATANODES and merged.get("hostname") is None:
            merged["hostname"] = merged["datanode_uuid"]
        data.append(tuple(merged.get(f.name) for f in full.fields))
    return spark.createDataFrame(data, full)


def maintenance(spark: SparkSession, scms: dict[str, int] | None = None) -> DataFrame:
    return spark.createDataFrame(list((scms or {"scm1": 2}).items()), "scm string, maintenance_replica_minimum int")
