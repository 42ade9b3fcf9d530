"""Spark schemas of the export format, built from ``scm_server.audit_format`` (the shared module).

Reading with an explicit schema makes a file whose columns do not match the format fail at read
time instead of producing nulls.
"""

from __future__ import annotations

from pyspark.sql import types as T

from scm_server import audit_format as fmt

_TYPES: dict[str, T.DataType] = {
    "long": T.LongType(),
    "int": T.IntegerType(),
    "string": T.StringType(),
    "boolean": T.BooleanType(),
    "array<string>": T.ArrayType(T.StringType()),
}


def spark_schema(table: str) -> T.StructType:
    return T.StructType([T.StructField(name, _TYPES[kind], True) for name, kind in fmt.columns(table)])


FINDINGS = T.StructType(
    [
        T.StructField("kind", T.StringType(), False),
        T.StructField("container_id", T.LongType(), True),
        T.StructField("lifecycle_state", T.StringType(), True),
        T.StructField("datanode_uuid", T.StringType(), True),
        T.StructField("audit_verdict", T.StringType(), True),
        T.StructField("scm_verdict", T.StringType(), True),
        T.StructField("expected_replicas", T.IntegerType(), True),
        T.StructField("actual_replicas", T.IntegerType(), True),
        T.StructField("datanodes", T.ArrayType(T.StringType()), True),
        T.StructField("fields", T.ArrayType(T.StringType()), True),
        T.StructField("detail", T.StringType(), True),
        T.StructField("scm_ids", T.ArrayType(T.StringType()), True),
    ]
)
