"""Table-driven ReplicationManager scenarios (in the spirit of Ozone's replicationManagerTests/*.json).

Each JSON file under ``replication_scenarios/`` holds a list of scenarios::

    {"description": "...",
     "nodes": [{"id": "dn1", "rack": "/r1", "health": "HEALTHY", "opState": "IN_SERVICE"}, ...],
     "container": {"id": 1, "state": "CLOSED", "factor": "THREE", "numberOfKeys": 10,
                   "sequenceId": 5, "pipeline": "OPEN" | "CLOSED" | "NONE",
                   "ec": "rs-3-2-1024k"},                       # an EC container instead of RATIS
     "replicas": [{"datanode": "dn1", "state": "CLOSED", "keyCount": 10, "bcsid": 5,
                   "origin": "dn1", "isEmpty": false, "index": 1}, ...],  # index: EC replica index
     "pendingOps": [{"op": "ADD" | "DELETE", "datanode": "dn4"}],
     "config": {"hdds.scm.replication.datanode.replication.limit": "1"},
     "expected": {"health": "UNDER_REPLICATED", "states": [...], "lifecycleState": "CLOSED",
                  "commands": [{"type": "replicateContainerCommand", "datanode": ["dn4", "dn5"],
                                "force": false, "replicaIndex": 2, "missingIndexes": [3]}],
                  "report": {"UNDER_REPLICATED": 1}}}

A real SCM (stub HA, FakeClock) is built per scenario; the ReplicationManager runs one pass
and the commands queued for each datanode are compared with the expectation (a list of
datanodes means "any one of these").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scm_state_harness import FakeDatanode, make_scm

from scm_server.clock import FakeClock
from scm_server.container.container_manager import ContainerReplica
from scm_server.container.replication.replication_manager import PendingOpType, report_counts
from scm_server.metadata.enums import enum_name, enum_value
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.scm import StorageContainerManager

SCENARIO_DIR = Path(__file__).parent / "replication_scenarios"
CommandType = scm_datanode_pb2.SCMCommandProto.Type


def load_scenarios() -> list[Any]:
    cases = []
    for path in sorted(SCENARIO_DIR.glob("*.json")):
        for i, scenario in enumerate(json.loads(path.read_text())):
            cases.append(pytest.param(scenario, id=f"{path.stem}-{i}-{scenario['description'][:50]}"))
    return cases


SCENARIOS = load_scenarios()


def test_there_are_enough_scenarios_covering_every_health_state() -> None:
    assert len(SCENARIOS) >= 25
    covered = {s.values[0]["expected"]["health"] for s in SCENARIOS}  # type: ignore[index]
    assert covered >= {
        "HEALTHY",
        "UNDER_REPLICATED",
        "OVER_REPLICATED",
        "MIS_REPLICATED",
        "MISSING",
        "UNHEALTHY",
        "EMPTY",
        "OPEN_UNHEALTHY",
        "QUASI_CLOSED_STUCK",
        "OPEN_WITHOUT_PIPELINE",
    }


def ec_config(name: str) -> hdds_pb2.ECReplicationConfig:
    """``rs-3-2-1024k`` as Ozone's ECReplicationConfig."""
    codec, data, parity, chunk = name.split("-")
    return hdds_pb2.ECReplicationConfig(
        data=int(data), parity=int(parity), codec=codec, ecChunkSize=int(chunk.rstrip("k")) * 1024
    )


async def build(tmp_path: Path, scenario: dict[str, Any]) -> tuple[StorageContainerManager, int]:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock, **scenario.get("config", {}))
    nm = scm.node_manager
    for n in scenario["nodes"]:
        dn = FakeDatanode(uuid=n["id"], host=n["id"], rack=n.get("rack", "/r1"))
        await dn.register(scm)
        node = nm.require_node(n["id"])
        node.health = enum_value(hdds_pb2.NodeState, n.get("health", "HEALTHY"))
        node.op_state = enum_value(hdds_pb2.NodeOperationalState, n.get("opState", "IN_SERVICE"))
    c = scenario["container"]
    factor = enum_value(hdds_pb2.ReplicationFactor, c.get("factor", "THREE"))
    ec = ec_config(c["ec"]) if "ec" in c else None
    rtype = hdds_pb2.EC if ec is not None else hdds_pb2.RATIS
    pipeline_mode = c.get("pipeline", "NONE")
    pipeline_id = "pipeline-1"
    if pipeline_mode != "NONE":
        members = [nm.require_node(r["datanode"]).details for r in scenario["replicas"]] or [
            nm.require_node(scenario["nodes"][0]["id"]).details
        ]
        pipeline = hdds_pb2.Pipeline(
            id=hdds_pb2.PipelineID(id=pipeline_id),
            members=members,
            state=enum_value(hdds_pb2.PipelineState, "PIPELINE_" + pipeline_mode),  # type: ignore[arg-type]
            type=rtype,  # type: ignore[arg-type]
        )
        if ec is not None:
            pipeline.ecReplicationConfig.CopyFrom(ec)
            pipeline.memberReplicaIndexes.extend(r.get("index", 0) for r in scenario["replicas"])
        else:
            pipeline.factor = factor  # type: ignore[assignment]
        await scm.pipeline_state_manager.add_pipeline(pipeline)
    cid = c.get("id", 1)
    info = hdds_pb2.ContainerInfoProto(
        containerID=cid,
        state=enum_value(hdds_pb2.LifeCycleState, c["state"]),  # type: ignore[arg-type]
        pipelineID=hdds_pb2.PipelineID(id=pipeline_id),
        owner="om",
        numberOfKeys=c.get("numberOfKeys", 10),
        sequenceId=c.get("sequenceId", 5),
        replicationType=rtype,  # type: ignore[arg-type]
    )
    if ec is not None:
        info.ecReplicationConfig.CopyFrom(ec)
    else:
        info.replicationFactor = factor  # type: ignore[assignment]
    await scm.container_state_manager.add_container(info)
    for r in scenario["replicas"]:
        scm.container_manager.update_container_replica(
            ContainerReplica(
                container_id=cid,
                datanode_uuid=r["datanode"],
                state=enum_value(hdds_pb2.ContainerReplicaProto.State, r["state"]),
                sequence_id=r.get("bcsid", 5),
                key_count=r.get("keyCount", 10),
                origin_node_id=r.get("origin", r["datanode"]),
                is_empty=r.get("isEmpty", False),
                replica_index=r.get("index", 0),
            )
        )
    for op in scenario.get("pendingOps", []):
        scm.replication_manager.pending_ops.add(
            op.get("container", cid), PendingOpType[op["op"]], op["datanode"], clock.monotonic() + 600
        )
    # Setup may have queued commands (pipeline creation etc.); the scenario checks only RM's.
    nm.clear_command_queues()
    return scm, cid


def queued(scm: StorageContainerManager) -> list[tuple[str, str, scm_datanode_pb2.SCMCommandProto]]:
    out = []
    for node in scm.node_manager.all_nodes():
        for cmd in scm.node_manager.queued_commands(node.uuid):
            out.append((enum_name(CommandType, cmd.commandType), node.uuid, cmd))
    return out


def force_of(cmd: scm_datanode_pb2.SCMCommandProto) -> bool:
    if cmd.HasField("closeContainerCommandProto"):
        return cmd.closeContainerCommandProto.force
    if cmd.HasField("deleteContainerCommandProto"):
        return cmd.deleteContainerCommandProto.force
    return False


def replica_index_of(cmd: scm_datanode_pb2.SCMCommandProto) -> int:
    if cmd.HasField("deleteContainerCommandProto"):
        return cmd.deleteContainerCommandProto.replicaIndex
    if cmd.HasField("replicateContainerCommandProto"):
        return cmd.replicateContainerCommandProto.replicaIndex
    return 0


def missing_of(cmd: scm_datanode_pb2.SCMCommandProto) -> list[int]:
    return list(cmd.reconstructECContainersCommandProto.missingContainerIndexes)


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_scenario(tmp_path: Path, scenario: dict[str, Any]) -> None:
    scm, cid = await build(tmp_path, scenario)
    try:
        report = await scm.replication_manager.run_once()
        expected = scenario["expected"]
        result = scm.replication_manager.last_results[cid]
        assert result.health.value == expected["health"], result.reason
        for state in expected.get("states", []):
            assert state in {s.value for s in result.states}
        if "lifecycleState" in expected:
            actual_state = enum_name(hdds_pb2.LifeCycleState, scm.container_state_manager.get_container(cid).state)
            assert actual_state == expected["lifecycleState"]
        actual = queued(scm)
        wanted = expected.get("commands", [])
        remaining = list(actual)
        for want in wanted:
            options = want["datanode"] if isinstance(want.get("datanode"), list) else [want.get("datanode")]
            match = next(
                (
                    a
                    for a in remaining
                    if a[0] == want["type"]
                    and (options == [None] or a[1] in options)
                    and ("force" not in want or force_of(a[2]) == want["force"])
                    and ("replicaIndex" not in want or replica_index_of(a[2]) == want["replicaIndex"])
                    and ("missingIndexes" not in want or missing_of(a[2]) == want["missingIndexes"])
                ),
                None,
            )
            assert match is not None, f"expected {want} among {[(a[0], a[1]) for a in actual]}"
            remaining.remove(match)
        assert not remaining, f"unexpected commands {[(a[0], a[1]) for a in remaining]}"
        for _, _, cmd in actual:
            assert cmd.term == scm.scm_context.term  # stamped with the leader's term
            if cmd.commandType == CommandType.replicateContainerCommand:
                sources = {s.uuid for s in cmd.replicateContainerCommandProto.sources}
                assert sources and all(
                    scm.node_manager.require_node(s).health == hdds_pb2.HEALTHY for s in sources
                )
            if cmd.commandType == CommandType.reconstructECContainersCommand:
                rebuild = cmd.reconstructECContainersCommandProto
                targets = {t.uuid for t in rebuild.targets}
                held = {r["datanode"] for r in scenario["replicas"]}
                assert len(targets) == len(rebuild.missingContainerIndexes) and not targets & held
                assert len({s.replicaIndex for s in rebuild.sources}) >= rebuild.ecReplicationConfig.data
        counts = report_counts(report)
        assert counts[expected["health"]] == 1
        for key, value in expected.get("report", {}).items():
            assert counts[key] == value
        # A second pass must not re-issue replicate/delete work that is still pending.
        work = ("replicateContainerCommand", "deleteContainerCommand", "reconstructECContainersCommand")
        before = len([a for a in actual if a[0] in work])
        scm.node_manager.clear_command_queues()
        await scm.replication_manager.run_once()
        again = [a for a in queued(scm) if a[0] in work]
        assert len(again) == 0 or before == 0, f"re-issued {[(a[0], a[1]) for a in again]}"
    finally:
        await scm.stop()
