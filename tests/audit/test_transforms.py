"""The audit's DataFrame transforms on small hand-built frames, with exact expected results.

The classification is also cross-checked against every scenario SCM's own ReplicationManager is
tested with (``tests/unit/container/replication_scenarios/*.json``): each scenario becomes one
"SCM" of a single batch, so the whole set costs one Spark job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from frames import frame, maintenance
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from scm_audit import transforms as tr
from scm_audit import vocabulary as V
from scm_server import audit_format as fmt

SCENARIOS = Path(__file__).resolve().parent.parent / "unit" / "container" / "replication_scenarios"


def rows_by(df: Any, *keys: str) -> dict[Any, dict[str, Any]]:
    out = {}
    for r in df.collect():
        d = r.asDict()
        out[tuple(d[k] for k in keys) if len(keys) > 1 else d[keys[0]]] = d
    return out


def test_classification_agrees_with_every_replication_manager_scenario(spark: SparkSession) -> None:
    containers, replicas, nodes, pipelines, expected, maint = [], [], [], [], {}, {}
    for path in sorted(SCENARIOS.glob("*.json")):
        for i, sc in enumerate(json.loads(path.read_text())):
            scm = f"{path.stem}-{i}"
            c = sc["container"]
            cid = c.get("id", 1)
            containers.append(
                {
                    "scm": scm, "container_id": cid, "lifecycle_state": c["state"],
                    "replication_factor": c.get("factor", "THREE"), "number_of_keys": c.get("numberOfKeys", 10),
                    "sequence_id": c.get("sequenceId", 5), "pipeline_id": "pipeline-1",
                    "replication_type": "EC" if "ec" in c else "RATIS", "ec_replication": c.get("ec"),
                }
            )
            if c.get("pipeline", "NONE") != "NONE":
                pipelines.append({"scm": scm, "pipeline_id": "pipeline-1", "pipeline_state": "PIPELINE_" + c["pipeline"]})
            nodes += [
                {"scm": scm, "datanode_uuid": n["id"], "rack": n.get("rack", "/r1"), "health": n.get("health", "HEALTHY"),
                 "op_state": n.get("opState", "IN_SERVICE")}
                for n in sc["nodes"]
            ]
            replicas += [
                {"scm": scm, "container_id": cid, "datanode_uuid": r["datanode"], "replica_state": r["state"],
                 "bcsid": r.get("bcsid", 5), "key_count": r.get("keyCount", 10),
                 "origin_node_id": r.get("origin", r["datanode"]), "is_empty": r.get("isEmpty", False),
                 "replica_index": r.get("index", 0)}
                for r in sc["replicas"]
            ]
            maint[scm] = int(sc.get("config", {}).get("hdds.scm.replication.maintenance.replica.minimum", 2))
            expected[scm] = (sc["expected"]["health"], set(sc["expected"].get("states", [])), sc["description"])

    # One frame per table holding every scenario (each row names its scenario as its "scm").
    def batch(table: str, rows: list[dict[str, Any]]) -> Any:
        return frame(spark, table, rows)

    out = tr.classify(
        batch(fmt.CONTAINERS, containers), batch(fmt.REPLICAS, replicas), batch(fmt.DATANODES, nodes),
        batch(fmt.PIPELINES, pipelines), maintenance(spark, maint),
    )
    got = rows_by(out, "scm")
    assert len(expected) >= 25 and set(got) == set(expected)
    wrong = [
        f"{scm} ({desc}): SCM says {health} {sorted(states)}, audit says {got[scm]['health']} {got[scm]['states']}"
        for scm, (health, states, desc) in expected.items()
        if got[scm]["health"] != health or not states <= set(got[scm]["states"])
    ]
    assert not wrong, "\n".join(wrong)
    covered = {h for h, _, _ in expected.values()}
    assert covered >= set(V.HEALTH_STATES)


def small_cluster(spark: SparkSession) -> dict[str, Any]:
    """Six datanodes on two racks (dn6 DEAD, dn5 IN_MAINTENANCE) and one container per case."""
    nodes = [
        {"datanode_uuid": "dn1", "rack": "/r1"},
        {"datanode_uuid": "dn2", "rack": "/r1"},
        {"datanode_uuid": "dn3", "rack": "/r2"},
        {"datanode_uuid": "dn4", "rack": "/r2"},
        {"datanode_uuid": "dn5", "rack": "/r2", "op_state": "IN_MAINTENANCE", "health": "DEAD"},
        {"datanode_uuid": "dn6", "rack": "/r1", "health": "DEAD"},
    ]
    containers = [
        {"container_id": 1},  # healthy: dn1, dn3, dn4
        {"container_id": 2},  # under: dn1, dn3 (+ a copy on DEAD dn6 that does not count)
        {"container_id": 3},  # over: dn1..dn4
        {"container_id": 4},  # under: two copies, both on /r1
        {"container_id": 5},  # missing
        {"container_id": 6, "lifecycle_state": "OPEN", "pipeline_id": "gone"},  # open without pipeline
        {"container_id": 7, "lifecycle_state": "OPEN"},  # open with a closed replica: OPEN_UNHEALTHY
        {"container_id": 8, "number_of_keys": 0},  # empty
        {"container_id": 9, "replication_factor": "ONE"},  # one replica, factor ONE: healthy
        {"container_id": 10},  # unhealthy replica beside three good ones
        {"container_id": 11},  # maintenance: dn5 (IN_MAINTENANCE, dead) + dn1 + dn3: need max(2, 3-1)=2 -> healthy
    ]
    replicas = [
        *({"container_id": 1, "datanode_uuid": d} for d in ("dn1", "dn3", "dn4")),
        *({"container_id": 2, "datanode_uuid": d} for d in ("dn1", "dn3", "dn6")),
        *({"container_id": 3, "datanode_uuid": d} for d in ("dn1", "dn2", "dn3", "dn4")),
        *({"container_id": 4, "datanode_uuid": d} for d in ("dn1", "dn2")),
        {"container_id": 7, "datanode_uuid": "dn1", "replica_state": "OPEN"},
        {"container_id": 7, "datanode_uuid": "dn3", "replica_state": "CLOSED"},
        *({"container_id": 8, "datanode_uuid": d, "key_count": 0, "is_empty": True} for d in ("dn1", "dn3")),
        {"container_id": 9, "datanode_uuid": "dn2"},
        *({"container_id": 10, "datanode_uuid": d} for d in ("dn1", "dn3", "dn4")),
        {"container_id": 10, "datanode_uuid": "dn2", "replica_state": "UNHEALTHY"},
        *({"container_id": 11, "datanode_uuid": d} for d in ("dn1", "dn3", "dn5")),
    ]
    pipelines = [{"pipeline_id": "p1"}]
    return {
        "containers": frame(spark, fmt.CONTAINERS, containers),
        "replicas": frame(spark, fmt.REPLICAS, replicas),
        "datanodes": frame(spark, fmt.DATANODES, nodes),
        "pipelines": frame(spark, fmt.PIPELINES, pipelines),
        "maintenance": maintenance(spark),
    }


def test_classify_exact(spark: SparkSession) -> None:
    f = small_cluster(spark)
    out = rows_by(tr.classify(f["containers"], f["replicas"], f["datanodes"], f["pipelines"], f["maintenance"]), "container_id")
    got = {cid: (r["health"], r["states"], r["expected_replicas"], r["actual_replicas"], r["datanodes"]) for cid, r in out.items()}
    assert got == {
        1: ("HEALTHY", ["HEALTHY"], 3, 3, ["dn1", "dn3", "dn4"]),
        2: ("UNDER_REPLICATED", ["UNDER_REPLICATED"], 3, 2, ["dn1", "dn3"]),
        3: ("OVER_REPLICATED", ["OVER_REPLICATED"], 3, 4, ["dn1", "dn2", "dn3", "dn4"]),
        4: ("UNDER_REPLICATED", ["UNDER_REPLICATED"], 3, 2, ["dn1", "dn2"]),
        5: ("MISSING", ["MISSING"], 3, 0, []),
        6: ("OPEN_WITHOUT_PIPELINE", ["OPEN_WITHOUT_PIPELINE"], 3, 0, []),
        7: ("OPEN_UNHEALTHY", ["OPEN_UNHEALTHY"], 3, 2, ["dn1", "dn3"]),
        8: ("EMPTY", ["EMPTY"], 3, 2, ["dn1", "dn3"]),
        9: ("HEALTHY", ["HEALTHY"], 1, 1, ["dn2"]),
        10: ("UNHEALTHY", ["UNHEALTHY"], 3, 3, ["dn1", "dn2", "dn3", "dn4"]),
        11: ("HEALTHY", ["HEALTHY"], 3, 2, ["dn1", "dn3", "dn5"]),
    }
    assert out[2]["detail"] == "2 of 3 replicas counted, 2 reported; states UNDER_REPLICATED"


def test_mis_replication_needs_two_racks_only_when_two_are_alive(spark: SparkSession) -> None:
    nodes = [{"datanode_uuid": f"dn{i}", "rack": "/r1"} for i in (1, 2, 3)] + [{"datanode_uuid": "dn4", "rack": "/r2"}]
    reps = [{"container_id": 1, "datanode_uuid": f"dn{i}"} for i in (1, 2, 3)]
    args = (frame(spark, fmt.CONTAINERS, [{"container_id": 1}]), frame(spark, fmt.REPLICAS, reps))
    live = tr.classify(*args, frame(spark, fmt.DATANODES, nodes), frame(spark, fmt.PIPELINES, []), maintenance(spark))
    assert [r["health"] for r in live.collect()] == ["MIS_REPLICATED"]
    nodes[3]["health"] = "DEAD"  # the only node of /r2 is dead: one rack left, the policy is met
    dead = tr.classify(*args, frame(spark, fmt.DATANODES, nodes), frame(spark, fmt.PIPELINES, []), maintenance(spark))
    assert [r["health"] for r in dead.collect()] == ["HEALTHY"]


def test_replica_findings_exact(spark: SparkSession) -> None:
    nodes = [
        {"datanode_uuid": "dn1"}, {"datanode_uuid": "dn2"},
        {"datanode_uuid": "dead", "health": "DEAD"},
        {"datanode_uuid": "maint", "health": "DEAD", "op_state": "IN_MAINTENANCE"},
        {"datanode_uuid": "gone", "op_state": "DECOMMISSIONED"},
    ]
    containers = [{"container_id": 1, "sequence_id": 9}, {"container_id": 2, "sequence_id": 0}, {"container_id": 3, "lifecycle_state": "QUASI_CLOSED"}]
    reps = [
        {"container_id": 1, "datanode_uuid": "dn1", "bcsid": 9},
        {"container_id": 1, "datanode_uuid": "dn2", "bcsid": 6},  # stale
        {"container_id": 2, "datanode_uuid": "dn1", "bcsid": 4},
        {"container_id": 2, "datanode_uuid": "dn2", "bcsid": 5},  # dn1 is below its sibling
        {"container_id": 2, "datanode_uuid": "dead", "bcsid": 5},
        {"container_id": 2, "datanode_uuid": "maint", "bcsid": 5},  # expected in maintenance: no finding
        {"container_id": 2, "datanode_uuid": "nobody", "bcsid": 5},  # unknown datanode
        {"container_id": 3, "datanode_uuid": "gone", "replica_state": "QUASI_CLOSED", "bcsid": 1},
        {"container_id": 3, "datanode_uuid": "dn1", "replica_state": "QUASI_CLOSED", "bcsid": 3},  # QC: no BCSID finding
    ]
    out = tr.replica_findings(frame(spark, fmt.CONTAINERS, containers), frame(spark, fmt.REPLICAS, reps), frame(spark, fmt.DATANODES, nodes))
    got = sorted((r["kind"], r["container_id"], r["datanode_uuid"], r["detail"]) for r in out.collect())
    assert got == [
        (V.REPLICA_BCSID_MISMATCH, 1, "dn2", "replica BCSID 6 < container BCSID 9"),
        (V.REPLICA_BCSID_MISMATCH, 2, "dn1", "replica BCSID 4 < container BCSID 5"),
        (V.REPLICA_ON_DEAD_NODE, 2, "dead", "replica listed on a DEAD datanode"),
        (V.REPLICA_ON_DEAD_NODE, 2, "nobody", "replica listed on a datanode this SCM does not know"),
        (V.REPLICA_ON_DECOMMISSIONED_NODE, 3, "gone", "replica listed on a DECOMMISSIONED datanode"),
    ]


def test_verdict_findings_list_both_verdicts(spark: SparkSession) -> None:
    f = small_cluster(spark)
    classified = tr.classify(f["containers"], f["replicas"], f["datanodes"], f["pipelines"], f["maintenance"])
    verdicts = [
        {"container_id": cid, "health": h, "states": [h]}
        for cid, h in [(1, "HEALTHY"), (2, "UNDER_REPLICATED"), (3, "HEALTHY"), (4, "UNDER_REPLICATED"), (5, "MISSING"),
                       (6, "OPEN_WITHOUT_PIPELINE"), (7, "OPEN_UNHEALTHY"), (8, "EMPTY"), (9, "HEALTHY"), (10, "UNHEALTHY"),
                       (99, "HEALTHY")]
    ]  # 3 differs, 11 has no SCM verdict, 99 is unknown to the audit
    out = tr.verdict_findings(classified, frame(spark, fmt.RM_VERDICTS, verdicts))
    got = sorted((r["container_id"], r["audit_verdict"], r["scm_verdict"]) for r in out.collect())
    assert got == [(3, "OVER_REPLICATED", "HEALTHY"), (11, "HEALTHY", None), (99, None, "HEALTHY")]
    detail = {r["container_id"]: r["detail"] for r in out.collect()}
    assert detail[3] == "audit: OVER_REPLICATED; SCM ReplicationManager: HEALTHY"


def test_cross_scm_lists_differing_fields_with_each_scms_value(spark: SparkSession) -> None:
    rows = {
        "scm1": [{"container_id": 1}, {"container_id": 2}, {"container_id": 3}],
        "scm2": [{"container_id": 1}, {"container_id": 2, "used_bytes": 999}, {"container_id": 3}],
        "scm3": [{"container_id": 1}, {"container_id": 2, "lifecycle_state": "QUASI_CLOSED"}],
    }
    containers = frame(spark, fmt.CONTAINERS, rows["scm1"], "scm1").unionByName(
        frame(spark, fmt.CONTAINERS, rows["scm2"], "scm2")
    ).unionByName(frame(spark, fmt.CONTAINERS, rows["scm3"], "scm3"))
    out = tr.cross_scm_container_findings(containers, ["scm1", "scm2", "scm3"])
    got = {r["container_id"]: (r["fields"], r["detail"]) for r in out.collect()}
    assert got == {
        2: (
            ["lifecycle_state", "used_bytes"],
            "lifecycle_state: scm1=CLOSED, scm2=CLOSED, scm3=QUASI_CLOSED; used_bytes: scm1=100, scm2=999, scm3=100",
        ),
        3: (["presence"], "missing on scm3"),
    }
    single = tr.cross_scm_container_findings(frame(spark, fmt.CONTAINERS, rows["scm1"], "scm1"), ["scm1"])
    assert single.count() == 0
    pipes = frame(spark, fmt.PIPELINES, [{"pipeline_id": "p", "members": ["b", "a"]}], "scm1").unionByName(
        frame(spark, fmt.PIPELINES, [{"pipeline_id": "p", "members": ["a", "b"], "pipeline_state": "PIPELINE_CLOSED"}], "scm2")
    )
    p = tr.cross_scm_pipeline_findings(pipes, ["scm1", "scm2"]).collect()
    assert [(r["fields"], r["detail"]) for r in p] == [
        (["pipeline_state"], "pipeline p: pipeline_state: scm1=PIPELINE_OPEN, scm2=PIPELINE_CLOSED")
    ]
    digests = {
        "scm1": {"deletedBlocks": {"sha256": "aa", "count": 1}, "containers": {"sha256": "x", "count": 3}},
        "scm2": {"deletedBlocks": {"sha256": "aa", "count": 1}, "containers": {"sha256": "y", "count": 3}},
        "scm3": {"deletedBlocks": {"sha256": "bb", "count": 2}, "containers": {"sha256": "x", "count": 3}},
    }
    d = tr.digest_findings(spark, digests).collect()
    assert [(r["kind"], r["fields"], r["detail"]) for r in d] == [
        (V.CROSS_SCM_TABLE, ["deletedBlocks"], "deletedBlocks: scm1=aa (1 rows), scm2=aa (1 rows), scm3=bb (2 rows)")
    ]


def test_findings_merge_across_scms_and_count_by_datanode_and_rack(spark: SparkSession) -> None:
    f = small_cluster(spark)
    per_scm = []
    for scm in ("scm1", "scm2"):
        classified = tr.classify(
            f["containers"].withColumn("scm", F.lit(scm)),
            f["replicas"].withColumn("scm", F.lit(scm)),
            f["datanodes"].withColumn("scm", F.lit(scm)),
            f["pipelines"].withColumn("scm", F.lit(scm)),
            maintenance(spark, {"scm1": 2, "scm2": 2}),
        )
        per_scm.append(tr.health_findings(classified))
    merged = tr.merge_findings(per_scm).cache()
    got = sorted((r["kind"], r["container_id"], r["scm_ids"]) for r in merged.collect())
    assert got == [
        ("EMPTY", 8, ["scm1", "scm2"]),
        ("MISSING", 5, ["scm1", "scm2"]),
        ("OPEN_UNHEALTHY", 7, ["scm1", "scm2"]),
        ("OPEN_WITHOUT_PIPELINE", 6, ["scm1", "scm2"]),
        ("OVER_REPLICATED", 3, ["scm1", "scm2"]),
        ("UNDER_REPLICATED", 2, ["scm1", "scm2"]),
        ("UNDER_REPLICATED", 4, ["scm1", "scm2"]),
        ("UNHEALTHY", 10, ["scm1", "scm2"]),
    ]
    by_dn = tr.findings_by_datanode(merged, f["datanodes"])
    assert {r["datanode_uuid"]: (r["findings"], r["rack"]) for r in by_dn.collect()} == {
        "dn1": (6, "/r1"), "dn2": (3, "/r1"), "dn3": (5, "/r2"), "dn4": (2, "/r2"),
    }
    assert {r["rack"]: (r["findings"], r["datanodes"]) for r in tr.findings_by_rack(by_dn).collect()} == {
        "/r1": (9, 2), "/r2": (7, 2),
    }


def test_container_findings_carry_both_verdicts(spark: SparkSession) -> None:
    """The findings tables' "SCM" column: SCM's own verdict of the container, from the same SCM's export."""
    f = small_cluster(spark)
    classified = tr.classify(f["containers"], f["replicas"], f["datanodes"], f["pipelines"], f["maintenance"])
    verdicts = frame(spark, fmt.RM_VERDICTS, [
        {"container_id": 2, "health": "UNDER_REPLICATED", "states": ["UNDER_REPLICATED"]},
        {"container_id": 3, "health": "HEALTHY", "states": ["HEALTHY"]},
        {"container_id": 5, "health": "MISSING", "states": ["MISSING"]},
    ])
    stale = frame(spark, fmt.REPLICAS, [{"container_id": 1, "datanode_uuid": "dn1", "bcsid": 1},
                                        {"container_id": 1, "datanode_uuid": "dn3", "bcsid": 5}])
    findings = tr.health_findings(classified).unionByName(
        tr.replica_findings(f["containers"], stale, f["datanodes"])
    )
    out = tr.with_verdicts(findings, classified, verdicts)
    got = {(r["kind"], r["container_id"]): (r["audit_verdict"], r["scm_verdict"]) for r in out.collect()}
    assert got[("UNDER_REPLICATED", 2)] == ("UNDER_REPLICATED", "UNDER_REPLICATED")
    assert got[("OVER_REPLICATED", 3)] == ("OVER_REPLICATED", "HEALTHY")
    assert got[("MISSING", 5)] == ("MISSING", "MISSING")
    assert got[("UNDER_REPLICATED", 4)] == ("UNDER_REPLICATED", None)  # SCM exported no verdict for it
    assert got[(V.REPLICA_BCSID_MISMATCH, 1)] == ("HEALTHY", None)
    assert out.columns == tr.health_findings(classified).columns
