"""The audit as pure DataFrame -> DataFrame functions (no I/O; the job reads and writes).

Every input frame carries ``scm`` (the export's label: the SCM's node id) next to the columns of
``scm_server.audit_format``; every function keys by it, so one run audits any number of SCM
exports side by side. Only built-in column expressions and higher-order functions (``filter``,
``transform``, ``exists``...) are used: no Python UDF, so the work stays in the JVM.

Classification (:func:`classify`) is an independent re-implementation of SCM's
ReplicationManager check chain (``scm_server/container/replication/health.py``), in Ozone's terms:

* replicas on DEAD datanodes are gone (DeadNodeHandler), except on IN_MAINTENANCE nodes; a
  replica on a datanode the SCM does not know counts as on a DEAD one;
* OPEN: OPEN_WITHOUT_PIPELINE when its pipeline is not PIPELINE_OPEN (or gone), OPEN_UNHEALTHY
  when a replica is neither OPEN nor CLOSING; CLOSING: MISSING without replicas; DELETING and
  DELETED: HEALTHY;
* CLOSED / QUASI_CLOSED: MISSING (no replica), EMPTY (CLOSED, no keys, only empty CLOSED
  replicas), then the replicas whose state matches the container's count (plus, for CLOSED, a
  not-yet-closed replica from a HEALTHY node with the container's BCSID; otherwise OPEN/CLOSING
  ones), QUASI_CLOSED_STUCK (quasi-closed replicas from too few origins at the best BCSID),
  UNHEALTHY (no good replica, or bad ones beside enough good ones), UNDER_REPLICATED (fewer
  IN_SERVICE copies than needed, maintenance copies lowering the need down to
  ``hdds.scm.replication.maintenance.replica.minimum``), OVER_REPLICATED, MIS_REPLICATED (IN_SERVICE
  copies on fewer than min(2, live racks, factor) racks; EC: every index in service once but on fewer than
  min(d+p, live racks) racks, or more than ceil(d+p / that) on one rack, as RackScatter judges), else HEALTHY.

The primary health state follows Ozone's report order (``vocabulary.PRIMARY_ORDER``).

Findings (one schema, ``schema.FINDINGS``): every container whose health is not HEALTHY; replica
findings the ReplicationManager does not report (a CLOSED replica whose BCSID is below the
container's, replicas still listed on DEAD or DECOMMISSIONED datanodes); every container where
the audit's verdict differs from SCM's own (both verdicts); and, with several SCMs, every
container or pipeline whose replicated row differs between SCMs (the differing fields, each SCM's
value) and every other replicated table whose digest differs. :func:`merge_findings` folds the
same finding seen in several SCMs' exports into one row listing those SCMs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window, WindowSpec

from scm_audit import vocabulary as V
from scm_audit.schema import FINDINGS
from scm_server import audit_format as fmt

CLASSIFIED_COLUMNS = (
    "scm",
    "container_id",
    "lifecycle_state",
    "health",
    "states",
    "expected_replicas",
    "actual_replicas",
    "reported_replicas",
    "datanodes",
    "detail",
)


def _s(value: str) -> Column:
    return F.lit(value)


def replica_facts(replicas: DataFrame, datanodes: DataFrame) -> DataFrame:
    """Each replica with its datanode's rack, health and operational state as its SCM knows them
    (an unknown datanode: DEAD, IN_SERVICE, the default rack)."""
    nodes = datanodes.select(
        "scm", "datanode_uuid", F.col("rack").alias("_rack"), F.col("health").alias("_health"),
        F.col("op_state").alias("_op_state"), F.col("hostname"),
    )
    return (
        replicas.join(F.broadcast(nodes), ["scm", "datanode_uuid"], "left")
        .withColumn("known_node", F.col("_health").isNotNull())
        .withColumn("rack", F.coalesce(F.nullif(F.col("_rack"), _s("")), _s(V.DEFAULT_RACK)))
        .withColumn("node_health", F.coalesce(F.col("_health"), _s(V.NODE_DEAD)))
        .withColumn("node_op_state", F.coalesce(F.col("_op_state"), _s(V.IN_SERVICE)))
        .drop("_rack", "_health", "_op_state")
    )


def cluster_params(datanodes: DataFrame, maintenance: DataFrame) -> DataFrame:
    """Per SCM: racks with a live (not DEAD) datanode, and the maintenance replica minimum.
    ``maintenance`` is (scm, maintenance_replica_minimum)."""
    racks = (
        datanodes.where(F.col("health") != _s(V.NODE_DEAD))
        .groupBy("scm")
        .agg(F.countDistinct(F.coalesce(F.nullif(F.col("rack"), _s("")), _s(V.DEFAULT_RACK))).alias("cluster_racks"))
    )
    return maintenance.join(racks, "scm", "left").fillna(0, ["cluster_racks"])


def count_over(flag: str, window: WindowSpec) -> Column:
    """How many rows of ``window`` have ``flag`` set."""
    return F.sum(F.col(flag).cast("int")).over(window)


def classify(
    containers: DataFrame, replicas: DataFrame, datanodes: DataFrame, pipelines: DataFrame, maintenance: DataFrame
) -> DataFrame:
    """One row per (scm, container): its health states as SCM's ReplicationManager defines them.

    Shape of the computation (one shuffle of the replicas): each replica is joined with its
    datanode (broadcast) and its container, flagged (live, good, bad, in service...) with plain
    column expressions, the two per-container maxima the flags need (the container's BCSID, the
    best quasi-closed BCSID) come from windows over the same partitioning, then one aggregation per
    container counts what the check chain looks at; the states follow from those counts alone."""
    state = F.col("lifecycle_state")
    ec_parts = F.split(F.coalesce(F.col("ec_replication"), _s("")), "-")
    is_ec_layout = F.coalesce(F.col("ec_replication"), _s("")) != _s("")
    info = containers.select(
        "scm", "container_id", "lifecycle_state", "replication_factor", "pipeline_id",
        F.coalesce(F.col("sequence_id"), F.lit(0)).alias("stored_seq"),
        F.coalesce(F.col("number_of_keys"), F.lit(0)).alias("stored_keys"),
        is_ec_layout.alias("is_ec"),
        F.when(is_ec_layout, ec_parts.getItem(1).cast("int")).otherwise(F.lit(0)).alias("ec_data"),
        F.when(is_ec_layout, ec_parts.getItem(2).cast("int")).otherwise(F.lit(0)).alias("ec_parity"),
    )
    facts = replica_facts(replicas, datanodes).select(
        "scm", "container_id", "datanode_uuid", "replica_state", "rack", "node_health", "node_op_state",
        F.coalesce(F.col("replica_index"), F.lit(0)).alias("replica_index"),
        F.coalesce(F.col("bcsid"), F.lit(0)).alias("bcsid"),
        F.coalesce(F.col("key_count"), F.lit(0)).alias("key_count"),
        F.coalesce(F.col("is_empty"), F.lit(False)).alias("is_empty"),
        F.coalesce(F.nullif(F.col("origin_node_id"), _s("")), F.col("datanode_uuid")).alias("origin"),
    )
    per_container = Window.partitionBy("scm", "container_id")
    rs = F.col("replica_state")
    bad_state = rs.isin(V.R_UNHEALTHY, V.R_INVALID)
    live = (F.col("node_health") != _s(V.NODE_DEAD)) | (F.col("node_op_state") == _s(V.IN_MAINTENANCE))
    matches = (
        F.when(state == _s(V.CLOSED), rs == _s(V.R_CLOSED))
        .when(state == _s(V.QUASI_CLOSED), rs.isin(V.R_QUASI_CLOSED, V.R_CLOSED))
        .otherwise(~bad_state)
    )
    extra = F.when(
        state == _s(V.CLOSED), (F.col("node_health") == _s(V.NODE_HEALTHY)) & (F.col("bcsid") >= F.col("merged_seq"))
    ).otherwise(rs.isin(V.R_OPEN, V.R_CLOSING))
    flagged = (
        facts.join(info, ["scm", "container_id"])
        .withColumn("merged_seq", F.greatest(F.col("stored_seq"), F.max("bcsid").over(per_container)))
        .select(
            "*",
            live.alias("live"),
            (live & bad_state).alias("bad"),
            (
                live
                & F.when(
                    F.col("is_ec"),
                    ~bad_state & F.col("replica_index").between(1, F.col("ec_data") + F.col("ec_parity")),
                ).otherwise(matches | (~bad_state & extra))
            ).alias("good"),
        )
        .select(
            "*",
            (F.col("good") & (F.col("node_op_state") == _s(V.IN_SERVICE))).alias("in_service"),
            (F.col("good") & F.col("node_op_state").isin(V.ENTERING_MAINTENANCE, V.IN_MAINTENANCE)).alias("maint"),
            (F.col("good") & (rs == _s(V.R_QUASI_CLOSED))).alias("qc"),
        )
        .withColumn("best_qc", F.max(F.when(F.col("qc"), F.col("bcsid"))).over(per_container))
        # in-service copies on this replica's rack (EC rack spread: the fullest rack's share)
        .withColumn(
            "rack_in_service", count_over("in_service", Window.partitionBy("scm", "container_id", "rack"))
        )
    )

    def count(flag: str) -> Column:
        return F.sum(F.col(flag).cast("int"))

    agg = flagged.groupBy("scm", "container_id").agg(
        count("live").alias("n_live"),
        count("good").alias("n_good"),
        count("bad").alias("n_bad"),
        count("in_service").alias("in_service"),
        count("maint").alias("maint"),
        count("qc").alias("n_qc"),
        F.size(F.collect_set(F.when(F.col("qc") & (F.col("bcsid") == F.col("best_qc")), F.col("origin")))).alias("origins"),
        F.size(F.collect_set(F.when(F.col("in_service"), F.col("rack")))).alias("racks"),
        F.max(F.when(F.col("in_service"), F.col("rack_in_service"))).alias("rack_max"),
        F.min(F.when(F.col("live"), F.col("is_empty") & (F.col("key_count") == 0) & (rs == _s(V.R_CLOSED)))).alias("all_empty"),
        F.max(F.when(F.col("live"), ~rs.isin(V.R_OPEN, V.R_CLOSING))).alias("open_bad"),
        F.max("key_count").alias("max_keys"),
        F.array_sort(F.collect_list(F.when(F.col("live"), F.col("datanode_uuid")))).alias("datanodes"),
        # EC (ECContainerReplicaCount): distinct indexes in service, in maintenance, available at all
        F.size(F.collect_set(F.when(F.col("in_service"), F.col("replica_index")))).alias("ec_in_service"),
        F.size(F.collect_set(F.when(F.col("in_service") | F.col("maint"), F.col("replica_index")))).alias("ec_kept"),
        F.size(F.collect_set(F.when(F.col("good"), F.col("replica_index")))).alias("ec_available"),
    )
    params = cluster_params(datanodes, maintenance)
    pipe = pipelines.select("scm", "pipeline_id", "pipeline_state")
    c = (
        info.join(agg, ["scm", "container_id"], "left")
        .join(F.broadcast(pipe), ["scm", "pipeline_id"], "left")
        .join(F.broadcast(params), "scm", "left")
        .fillna(0, ["n_live", "n_good", "n_bad", "in_service", "maint", "n_qc", "origins", "racks", "max_keys",
                    "ec_in_service", "ec_kept", "ec_available", "rack_max"])
        .withColumn("datanodes", F.coalesce(F.col("datanodes"), F.array().cast("array<string>")))
    )
    # The decision, as one projection over attributes. Each condition is written out flat in terms
    # of the aggregated counts (no condition refers to another derived column): a filter on
    # ``health`` downstream is pushed below this projection by the optimizer, which then inlines
    # the definitions, and chained definitions would blow the plan up combinatorially.
    col = F.col
    state = col("lifecycle_state")
    ec = col("is_ec")
    width = col("ec_data") + col("ec_parity")
    required = (
        F.when(ec, width).when(col("replication_factor") == _s("ONE"), F.lit(1)).otherwise(F.lit(3))
    )
    maint_min = F.coalesce(col("maintenance_replica_minimum"), F.lit(2))
    needed = F.when(col("maint") > 0, F.greatest(F.least(maint_min, required), required - col("maint"))).otherwise(required)
    is_open = state == _s(V.OPEN)
    pipeline_open = F.coalesce(col("pipeline_state") == _s(V.PIPELINE_OPEN), F.lit(False))
    closed_branch = ~state.isin(V.OPEN, V.CLOSING, V.DELETING, V.DELETED)
    no_keys_all_empty = (
        (state == _s(V.CLOSED))
        & (F.greatest(col("stored_keys"), col("max_keys")) == 0)
        & F.coalesce(col("all_empty"), F.lit(True))
    )
    # EC (ec_health): fewer than data distinct indexes available is MISSING; an index absent from the
    # in-service ones is under-replicated unless maintenance may keep it (parity - 1 of them may, with
    # hdds.scm.replication.maintenance.remaining.redundancy at its default 1); over: an index twice in service
    ec_unrecoverable = ec & (col("ec_available") < col("ec_data"))
    ec_allowed_in_maintenance = F.greatest(col("ec_parity") - F.least(col("ec_parity"), F.lit(1)), F.lit(0))
    ec_covered = col("ec_in_service") + F.least(col("ec_kept") - col("ec_in_service"), ec_allowed_in_maintenance)
    missing = (closed_branch | (state == _s(V.CLOSING))) & (col("n_live") == 0)
    empty = closed_branch & (col("n_live") > 0) & no_keys_all_empty
    checked = closed_branch & (col("n_live") > 0) & ~no_keys_all_empty
    ec_missing = checked & ec_unrecoverable
    stuck = (
        checked & ~ec & (state == _s(V.QUASI_CLOSED))
        & ~((col("n_qc") > 0) & (col("origins") > F.floor(required / 2)))
    )
    ec_under = checked & ec & ~ec_unrecoverable & (ec_covered < width)
    under = (checked & ~ec & (col("n_good") > 0) & (col("in_service") < needed)) | ec_under
    unhealthy = (checked & ~ec & ((col("n_good") == 0) | (col("n_bad") > 0))) | (
        checked & ec & ~ec_unrecoverable & (col("n_bad") > 0)
    )
    settled = checked & ~ec & (col("n_good") > 0) & (col("in_service") >= needed) & (col("n_bad") == 0)
    policy_ok = (
        (required <= 1) | (col("in_service") == 0) | (col("racks") >= F.least(F.lit(2), col("cluster_racks"), required))
    )
    ec_over = (
        checked & ec & ~ec_unrecoverable & (ec_covered >= width) & (col("n_bad") == 0)
        & (col("in_service") > col("ec_in_service"))
    )
    over = (settled & (col("in_service") > required)) | ec_over
    # EC (ECMisReplicationCheckHandler with RackScatter): once every index is in service once, the in-service
    # copies span min(d+p, live racks) racks and no rack holds more than ceil(d+p / that)
    ec_racks_needed = F.greatest(F.least(width, col("cluster_racks")), F.lit(1))
    ec_share = F.ceil(width / ec_racks_needed)
    ec_mis = (
        checked & ec & ~ec_unrecoverable & (ec_covered >= width) & (col("n_bad") == 0)
        & (col("in_service") == col("ec_in_service"))
        & ((col("racks") < ec_racks_needed) | (col("rack_max") > ec_share))
    )
    mis = (settled & (col("in_service") <= required) & ~policy_ok) | ec_mis
    conditions = {
        V.MISSING: missing | ec_missing,
        V.EMPTY: empty,
        V.OPEN_WITHOUT_PIPELINE: is_open & ~pipeline_open,
        V.OPEN_UNHEALTHY: is_open & pipeline_open & F.coalesce(col("open_bad"), F.lit(False)),
        V.QUASI_CLOSED_STUCK: stuck,
        V.UNDER_REPLICATED: under,
        V.UNHEALTHY: unhealthy,
        V.MIS_REPLICATED: mis,
        V.OVER_REPLICATED: over,
    }
    health = F.when(F.lit(False), _s(V.HEALTHY))
    for name in V.PRIMARY_ORDER:
        if name != V.HEALTHY:
            health = health.when(conditions[name], _s(name))
    health = health.otherwise(_s(V.HEALTHY))
    found = F.array_compact(F.array(*[F.when(conditions[name], _s(name)) for name in sorted(conditions)]))
    states = F.when(F.size(found) == 0, F.array(_s(V.HEALTHY))).otherwise(found)
    actual = F.when(closed_branch & ec, col("ec_in_service")).when(closed_branch, col("in_service")).otherwise(
        col("n_live")
    )
    return c.select(
        "scm",
        "container_id",
        "lifecycle_state",
        health.alias("health"),
        states.alias("states"),
        required.cast("int").alias("expected_replicas"),
        actual.cast("int").alias("actual_replicas"),
        col("n_live").cast("int").alias("reported_replicas"),
        "datanodes",
        F.concat(
            actual.cast("string"), _s(" of "), required.cast("string"), _s(" replicas counted, "),
            col("n_live").cast("string"), _s(" reported; states "), F.array_join(states, ","),
        ).alias("detail"),
    )


def _finding(df: DataFrame, **cols: Column) -> DataFrame:
    """Project ``df`` onto the findings schema (missing columns null) keeping ``scm``."""
    out = [F.col("scm")]
    for field in FINDINGS.fields:
        if field.name == "scm_ids":
            continue
        expr = cols.get(field.name, F.lit(None))
        out.append(expr.cast(field.dataType).alias(field.name))
    return df.select(*out)


def health_findings(classified: DataFrame) -> DataFrame:
    """Every container whose primary health is not HEALTHY."""
    bad = classified.where(F.col("health") != _s(V.HEALTHY))
    return _finding(
        bad,
        kind=F.col("health"),
        container_id=F.col("container_id"),
        lifecycle_state=F.col("lifecycle_state"),
        audit_verdict=F.col("health"),
        expected_replicas=F.col("expected_replicas"),
        actual_replicas=F.col("actual_replicas"),
        datanodes=F.col("datanodes"),
        fields=F.col("states"),
        detail=F.col("detail"),
    )


def replica_findings(containers: DataFrame, replicas: DataFrame, datanodes: DataFrame) -> DataFrame:
    """What the ReplicationManager does not report: a CLOSED replica of a CLOSED container whose
    BCSID is below the container's (the highest of the stored BCSID and its CLOSED replicas'), and
    replicas still listed on DEAD (not in maintenance) or DECOMMISSIONED datanodes."""
    facts = replica_facts(replicas, datanodes).join(
        containers.select("scm", "container_id", "lifecycle_state", F.col("sequence_id").alias("stored_bcsid")),
        ["scm", "container_id"],
        "left",
    )
    closed = facts.where((F.col("lifecycle_state") == _s(V.CLOSED)) & (F.col("replica_state") == _s(V.R_CLOSED)))
    best = closed.groupBy("scm", "container_id").agg(F.max("bcsid").alias("best_replica_bcsid"))
    stale = (
        closed.join(best, ["scm", "container_id"])
        .withColumn("reference", F.greatest(F.coalesce(F.col("stored_bcsid"), F.lit(0)), F.col("best_replica_bcsid")))
        .where(F.col("bcsid") < F.col("reference"))
    )
    stale_f = _finding(
        stale,
        kind=_s(V.REPLICA_BCSID_MISMATCH),
        container_id=F.col("container_id"),
        lifecycle_state=F.col("lifecycle_state"),
        datanode_uuid=F.col("datanode_uuid"),
        datanodes=F.array(F.col("datanode_uuid")),
        detail=F.concat(
            _s("replica BCSID "), F.col("bcsid").cast("string"), _s(" < container BCSID "), F.col("reference").cast("string")
        ),
    )
    dead = facts.where((F.col("node_health") == _s(V.NODE_DEAD)) & (F.col("node_op_state") != _s(V.IN_MAINTENANCE)))
    dead_f = _finding(
        dead,
        kind=_s(V.REPLICA_ON_DEAD_NODE),
        container_id=F.col("container_id"),
        lifecycle_state=F.col("lifecycle_state"),
        datanode_uuid=F.col("datanode_uuid"),
        datanodes=F.array(F.col("datanode_uuid")),
        detail=F.when(F.col("known_node"), _s("replica listed on a DEAD datanode")).otherwise(
            _s("replica listed on a datanode this SCM does not know")
        ),
    )
    decom = facts.where(F.col("node_op_state") == _s(V.DECOMMISSIONED))
    decom_f = _finding(
        decom,
        kind=_s(V.REPLICA_ON_DECOMMISSIONED_NODE),
        container_id=F.col("container_id"),
        lifecycle_state=F.col("lifecycle_state"),
        datanode_uuid=F.col("datanode_uuid"),
        datanodes=F.array(F.col("datanode_uuid")),
        detail=_s("replica listed on a DECOMMISSIONED datanode"),
    )
    return stale_f.unionByName(dead_f).unionByName(decom_f)


def with_verdicts(findings: DataFrame, classified: DataFrame, rm_verdicts: DataFrame) -> DataFrame:
    """Fill both verdicts of per-SCM container findings (health and replica findings): the audit's
    health of the container and SCM's own ReplicationManager verdict, each from the same SCM's
    export. A verdict already set is kept; a finding without a container keeps nulls."""
    scm = rm_verdicts.select("scm", "container_id", F.col("health").alias("_scm_verdict"))
    ours = classified.select("scm", "container_id", F.col("health").alias("_audit_verdict"))
    joined = findings.join(scm, ["scm", "container_id"], "left").join(ours, ["scm", "container_id"], "left")
    cols = [F.col("scm")]
    for field in FINDINGS.fields:
        if field.name == "scm_ids":
            continue
        if field.name == "audit_verdict":
            cols.append(F.coalesce(F.col("audit_verdict"), F.col("_audit_verdict")).alias("audit_verdict"))
        elif field.name == "scm_verdict":
            cols.append(F.coalesce(F.col("scm_verdict"), F.col("_scm_verdict")).alias("scm_verdict"))
        else:
            cols.append(F.col(field.name))
    return joined.select(*cols)


def verdict_findings(classified: DataFrame, rm_verdicts: DataFrame) -> DataFrame:
    """Every container where the audit's primary health differs from SCM's ReplicationManager
    verdict over the same snapshot (or one of them has no verdict at all)."""
    scm = rm_verdicts.select("scm", "container_id", F.col("health").alias("scm_verdict"), F.col("states").alias("scm_states"))
    ours = classified.select("scm", "container_id", "lifecycle_state", F.col("health").alias("audit_verdict"), "states")
    joined = ours.join(scm, ["scm", "container_id"], "full_outer")
    differ = joined.where(~F.col("audit_verdict").eqNullSafe(F.col("scm_verdict")))
    return _finding(
        differ,
        kind=_s(V.VERDICT_MISMATCH),
        container_id=F.col("container_id"),
        lifecycle_state=F.col("lifecycle_state"),
        audit_verdict=F.col("audit_verdict"),
        scm_verdict=F.col("scm_verdict"),
        fields=F.col("states"),
        detail=F.concat(
            _s("audit: "), F.coalesce(F.array_join("states", ","), _s("no verdict")),
            _s("; SCM ReplicationManager: "), F.coalesce(F.array_join("scm_states", ","), _s("no verdict")),
        ),
    )


def _field_of(name: str) -> Any:
    return lambda r: r[name]


def _labelled(name: str) -> Any:
    return lambda r: F.concat(r["scm"], _s("="), r[name])


def _cross_scm(rows: DataFrame, key: str, fields: Sequence[str], scms: Sequence[str]) -> DataFrame:
    """Rows of a replicated table that differ between SCM exports: (key, fields, detail).

    A field differs when the SCMs holding the row disagree on it; ``presence`` differs when some
    SCM has no such row. ``detail`` names each SCM's value of every differing field."""
    n = len(scms)
    as_text = [F.coalesce(F.col(f).cast("string"), _s("∅")).alias(f) for f in fields]
    grouped = rows.select("scm", key, *as_text).groupBy(key).agg(
        F.array_sort(F.collect_list(F.struct("scm", *fields))).alias("rows")
    )
    parts = []
    names = []
    for f in fields:
        value, labelled = _field_of(f), _labelled(f)
        differs = F.size(F.array_distinct(F.transform("rows", value))) > 1
        names.append(F.when(differs, _s(f)))
        parts.append(F.when(differs, F.concat(_s(f + ": "), F.array_join(F.transform("rows", labelled), ", "))))
    present = F.transform("rows", lambda r: r["scm"])
    absent = F.array_except(F.array(*[_s(s) for s in scms]), present)
    names.append(F.when(F.size(absent) > 0, _s("presence")))
    parts.append(F.when(F.size(absent) > 0, F.concat(_s("missing on "), F.array_join(absent, ", "))))
    out = grouped.select(
        key,
        F.array_compact(F.array(*names)).alias("fields"),
        F.concat_ws("; ", *parts).alias("detail"),
        present.alias("present"),
    ).where(F.size("fields") > 0)
    return out if n > 1 else out.limit(0)


def cross_scm_container_findings(containers: DataFrame, scms: Sequence[str]) -> DataFrame:
    diff = _cross_scm(containers, "container_id", fmt.CONTAINER_FIELDS, scms)
    return _finding(
        diff.withColumn("scm", F.array_join("present", ",")),
        kind=_s(V.CROSS_SCM_CONTAINER),
        container_id=F.col("container_id"),
        fields=F.col("fields"),
        detail=F.col("detail"),
    )


def cross_scm_pipeline_findings(pipelines: DataFrame, scms: Sequence[str]) -> DataFrame:
    rows = pipelines.withColumn("members", F.array_join(F.array_sort("members"), ","))
    diff = _cross_scm(rows, "pipeline_id", fmt.PIPELINE_FIELDS, scms)
    return _finding(
        diff.withColumn("scm", F.array_join("present", ",")),
        kind=_s(V.CROSS_SCM_PIPELINE),
        fields=F.col("fields"),
        detail=F.concat(_s("pipeline "), F.col("pipeline_id"), _s(": "), F.col("detail")),
    )


def digest_findings(spark: SparkSession, digests: Mapping[str, Mapping[str, Any]]) -> DataFrame:
    """Replicated column families (other than the row-compared ones) whose digests differ.
    ``digests`` is {scm label: manifest digests {table: {sha256, count}}}."""
    rows = []
    tables = sorted({t for d in digests.values() for t in d} - set(fmt.REPLICATED_TABLES))
    for table in tables:
        values = {scm: (d.get(table) or {}) for scm, d in sorted(digests.items())}
        if len({(v.get("sha256"), v.get("count")) for v in values.values()}) > 1:
            detail = f"{table}: " + ", ".join(
                f"{scm}={str(v.get('sha256', '∅'))[:12]} ({v.get('count', '?')} rows)" for scm, v in values.items()
            )
            rows.append((",".join(values), V.CROSS_SCM_TABLE, [table], detail))
    frame = spark.createDataFrame(
        rows, "scm string, kind string, fields array<string>, detail string"
    )
    return _finding(frame, kind=F.col("kind"), fields=F.col("fields"), detail=F.col("detail"))


def merge_findings(frames: Sequence[DataFrame]) -> DataFrame:
    """Union the per-SCM findings and fold identical ones into one row with the SCMs showing it
    (``scm_ids``, sorted). A finding that differs between SCMs stays one row per variant."""
    union = reduce(DataFrame.unionByName, frames)
    keys = [f.name for f in FINDINGS.fields if f.name != "scm_ids"]
    scms = F.explode(F.split(F.col("scm"), ","))
    return (
        union.select(*keys, scms.alias("scm"))
        .groupBy(*keys)
        .agg(F.array_sort(F.collect_set("scm")).alias("scm_ids"))
        .select(*[f.name for f in FINDINGS.fields])
    )


def findings_by_datanode(findings: DataFrame, datanodes: DataFrame) -> DataFrame:
    """Findings per datanode (a container finding counts once for each datanode holding a replica),
    with the datanode's hostname and rack."""
    nodes = datanodes.groupBy("datanode_uuid").agg(
        F.first("hostname", ignorenulls=True).alias("hostname"), F.first("rack", ignorenulls=True).alias("rack")
    )
    exploded = findings.select("kind", F.explode("datanodes").alias("datanode_uuid"))
    return (
        exploded.groupBy("datanode_uuid")
        .agg(F.count(F.lit(1)).alias("findings"))
        .join(nodes, "datanode_uuid", "left")
        .withColumn("rack", F.coalesce(F.col("rack"), _s(V.DEFAULT_RACK)))
    )


def findings_by_rack(by_datanode: DataFrame) -> DataFrame:
    """Findings and datanodes per rack, from :func:`findings_by_datanode`'s rows."""
    return by_datanode.groupBy("rack").agg(F.sum("findings").cast("long").alias("findings"), F.count(F.lit(1)).alias("datanodes"))
