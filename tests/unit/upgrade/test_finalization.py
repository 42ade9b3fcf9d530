"""SCM upgrade finalization through the facade (stub HA): an SCM whose metadata is at Ozone 1.4.1's layout (7)
with datanodes that run 2.2.0's software on 1.4.1's data (metadata layout 7, software 10), finalized as
`ozone admin scm finalizeupgrade` does; and a leader change between two finalization steps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from scm_state_harness import CLUSTER_ID, FakeDatanode, bring_up, make_scm

from scm_server import hdds_layout as layout
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.metadata import SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_datanode_pb2, scm_ratis_pb2
from scm_server.scm import StorageContainerManager

T = scm_datanode_pb2.SCMCommandProto.Type
Err = scm_datanode_pb2.SCMRegisteredResponseProto.ErrorCode
OZONE_1_4_1_LAYOUT = 7


@dataclass
class LayoutDatanode(FakeDatanode):
    """A fake datanode that reports its layout versions and finalizes when SCM tells it to."""

    metadata_layout: int = OZONE_1_4_1_LAYOUT
    software_layout: int = layout.SOFTWARE_LAYOUT_VERSION

    def layout(self) -> scm_datanode_pb2.LayoutVersionProto:
        return scm_datanode_pb2.LayoutVersionProto(
            metadataLayoutVersion=self.metadata_layout, softwareLayoutVersion=self.software_layout)

    async def register(
        self, scm: StorageContainerManager, cluster_id: str = CLUSTER_ID
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        return await scm.register_datanode(scm_datanode_pb2.SCMRegisterRequestProto(
            datanodeDetails=self.details, nodeReport=self.node_report(), containerReport=self.container_report(),
            pipelineReports=self.pipeline_report(), clusterID=cluster_id, dataNodeLayoutVersion=self.layout()))

    async def heartbeat(
        self, scm: StorageContainerManager, *, full: bool = True, **extra: object
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        extra.setdefault("dataNodeLayoutVersion", self.layout())
        return await super().heartbeat(scm, full=full, **extra)

    def execute(self, commands: list[scm_datanode_pb2.SCMCommandProto]) -> None:
        super().execute(commands)
        for c in commands:
            if c.commandType == T.finalizeNewLayoutVersionCommand:
                assert c.finalizeNewLayoutVersionCommandProto.finalizeNewLayoutVersion
                self.metadata_layout = c.finalizeNewLayoutVersionCommandProto.dataNodeLayoutVersion.metadataLayoutVersion


def datanodes(n: int = 3) -> list[LayoutDatanode]:
    return [LayoutDatanode(uuid=f"00000000-0000-0000-0000-{i:012d}", host=f"dn{i}") for i in range(1, n + 1)]


async def scm_at_old_layout(meta_dir: Path) -> StorageContainerManager:
    """An SCM whose VERSION says layout 7, as one that ran Ozone 1.4.1 (the harness keeps the layout)."""
    storage = SCMStorageConfig(meta_dir)
    storage.layout_version = OZONE_1_4_1_LAYOUT
    storage.initialize(cluster_id=CLUSTER_ID)
    return await make_scm(meta_dir)


def health(scm: StorageContainerManager) -> list[str]:
    return [hdds_pb2.NodeState.Name(n.health) for n in scm.node_manager.all_nodes()]


def open_ratis_three(scm: StorageContainerManager) -> list[hdds_pb2.Pipeline]:
    return scm.pipeline_manager.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE, {hdds_pb2.PIPELINE_OPEN})


def time_passing(scm: StorageContainerManager, dns: list[LayoutDatanode],
                 seen: list[dict[str, object]]) -> Callable[[float], Awaitable[None]]:
    """What happens while the finalizing leader waits for a pipeline: heartbeats (the datanodes finalize when
    told), a health check, the background pipeline creator, heartbeats that open what it created."""

    async def sleep(_seconds: float) -> None:
        created_before = await scm.pipeline_manager.create_pipelines_up_to_limit()
        seen.append({"health": health(scm), "status": scm.upgrade_finalization_progress("x", False, True)[0],
                     "created while readonly": created_before})
        for dn in dns:
            dn.execute(list((await dn.heartbeat(scm)).commands))
        await scm.run_health_check()
        await scm.pipeline_manager.create_pipelines_up_to_limit()
        for _ in range(2):
            for dn in dns:
                dn.execute(list((await dn.heartbeat(scm)).commands))

    return sleep


async def test_a_fresh_cluster_is_done_and_needs_no_finalizing(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    try:
        # Ozone's SCM prints FINALIZATION_DONE here (its upgrade context sets the status from the checkpoint)
        assert scm.upgrade_finalization_progress("c", False, True) == ("FINALIZATION_DONE", [])
        assert await scm.finalize_upgrade("c") == ("ALREADY_FINALIZED", [])
        assert scm.finalization_state_manager.metadata_layout_version == 10
    finally:
        await scm.stop()


async def test_finalizing_an_old_layout_with_old_datanodes(tmp_path: Path) -> None:
    scm = await scm_at_old_layout(tmp_path)
    dns = datanodes()
    try:
        # a datanode still running 1.4.1's software (software layout 7) may not register, as in Ozone
        old = LayoutDatanode(uuid="00000000-0000-0000-0000-000000000099", host="old", software_layout=7)
        refused = await old.register(scm)
        assert refused.errorCode == Err.errorNodeNotPermitted
        assert "software layout version 7 is not this SCM's (10)" in refused.errorMessage

        await bring_up(scm, dns)
        assert scm.upgrade_finalization_progress("c", False, True) == ("FINALIZATION_REQUIRED", [])
        # before SCM finalizes nothing is compared: the old-layout datanodes are HEALTHY and get no command
        await scm.run_health_check()
        assert health(scm) == ["HEALTHY"] * 3
        assert not any(c.commandType == T.finalizeNewLayoutVersionCommand for dn in dns for c in dn.received)
        first = open_ratis_three(scm)
        assert first

        seen: list[dict[str, object]] = []
        scm.finalization_manager.sleep = time_passing(scm, dns, seen)
        assert await scm.finalize_upgrade("client-1") == ("STARTING_FINALIZATION", ["Starting Finalization"])
        await scm.finalization_manager.wait()

        # at MLV_EQUALS_SLV every node was HEALTHY_READONLY and no pipeline could use them
        assert seen[0] == {"health": ["HEALTHY_READONLY"] * 3, "status": "FINALIZATION_IN_PROGRESS",
                           "created while readonly": 0}
        # each was told to finalize to its software layout, did, and is HEALTHY again
        for dn in dns:
            finalize = [c for c in dn.received if c.commandType == T.finalizeNewLayoutVersionCommand]
            assert finalize and finalize[0].term == scm.scm_context.term
            assert finalize[0].finalizeNewLayoutVersionCommandProto.dataNodeLayoutVersion.metadataLayoutVersion == 10
            assert dn.metadata_layout == 10
        assert health(scm) == ["HEALTHY"] * 3
        # the old pipelines were closed; a new one of finalized nodes is open
        assert all(scm.pipeline_manager.get_pipeline(p.id.id).state == hdds_pb2.PIPELINE_CLOSED for p in first)
        assert open_ratis_three(scm)

        assert scm.upgrade_finalization_progress("other", False, True) == ("FINALIZATION_DONE", [])
        with pytest.raises(SCMException) as err:
            scm.upgrade_finalization_progress("other", False, False)
        assert err.value.result is ResultCodes.INVALID_REQUEST and "check -takeover option" in str(err.value)
        assert scm.upgrade_finalization_progress("client-1", False, False) == ("FINALIZATION_DONE", [
            "Finalization started.",
            "  Existing pipelines and containers will be closed during Upgrade.\n"
            "  New pipelines creation will remain frozen until Upgrade is finalized.",
            "No onFinalize work defined for feature: HBASE_SUPPORT.",
            "No onFinalize work defined for feature: WITNESSED_CONTAINER_DB_PROTO_VALUE.",
            "No onFinalize work defined for feature: STORAGE_SPACE_DISTRIBUTION.",
            "Finalization is done.",
        ])
        assert scm.upgrade_finalization_progress("client-1", False, False) == ("FINALIZATION_DONE", [])  # drained
        assert SCMStorageConfig(tmp_path).layout_version == 10  # VERSION follows
        assert await scm.finalize_upgrade("again") == ("ALREADY_FINALIZED", [])
    finally:
        await scm.stop()

    again = await StorageContainerManager.create(scm.conf)
    try:
        assert again.finalization_state_manager.metadata_layout_version == 10
        assert again.upgrade_finalization_progress("c", False, True) == ("FINALIZATION_DONE", [])
    finally:
        await again.stop()


async def test_a_datanode_behind_a_finalized_scm_is_readonly_until_it_finalizes(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    try:
        dns = datanodes(4)
        dns[3].metadata_layout = OZONE_1_4_1_LAYOUT  # restarted on 2.2.0's jars, its data still 1.4.1's
        for dn in dns[:3]:
            dn.metadata_layout = 10
        await bring_up(scm, dns[:3])
        await dns[3].register(scm)
        assert health(scm) == ["HEALTHY"] * 3 + ["HEALTHY_READONLY"]
        # no pipeline takes the readonly node
        assert await scm.pipeline_manager.create_pipelines_up_to_limit() >= 0
        members = {m.uuid for p in scm.pipeline_manager.get_pipelines() for m in p.members}
        assert dns[3].uuid not in members
        answer = await dns[3].heartbeat(scm)
        commands = [c for c in answer.commands if c.commandType == T.finalizeNewLayoutVersionCommand]
        assert len(commands) == 1
        dns[3].execute(list(answer.commands))
        await dns[3].heartbeat(scm)
        await scm.run_health_check()
        assert health(scm) == ["HEALTHY"] * 4
    finally:
        await scm.stop()


async def test_a_new_leader_resumes_finalization_from_the_replicated_checkpoint(tmp_path: Path) -> None:
    leader = await scm_at_old_layout(tmp_path / "leader")
    follower = await scm_at_old_layout(tmp_path / "follower")
    dns = datanodes()
    log: list[bytes] = []
    real_submit = leader.ha_manager.submit_request
    finalized = 0

    async def submit_then_lose_leadership(
        request: scm_ratis_pb2.SCMRatisRequestProto, **kwargs: object
    ) -> scm_ratis_pb2.SCMRatisResponseProto:
        nonlocal finalized
        if request.method.name == "finalizeLayoutFeature":
            finalized += 1
            if finalized == 2:  # the leader loses its leadership after finalizing one feature
                raise NotLeaderException("leadership moved to the follower")
        log.append(request.SerializeToString())
        return await real_submit(request)

    leader.ha_manager.submit_request = submit_then_lose_leadership  # type: ignore[method-assign]

    async def never(_seconds: float) -> None:
        raise AssertionError("the old leader must stop before it waits for a pipeline")

    leader.finalization_manager.sleep = never
    try:
        await bring_up(leader, dns)
        assert await leader.finalize_upgrade("client-1") == ("STARTING_FINALIZATION", ["Starting Finalization"])
        await leader.finalization_manager.wait()
        assert leader.finalization_state_manager.metadata_layout_version == 8
        assert leader.upgrade_finalization_progress("c", False, True)[0] == "FINALIZATION_IN_PROGRESS"

        # the follower applied the same entries: the mark, the closed pipelines, layout 8
        for entry in log:
            request = scm_ratis_pb2.SCMRatisRequestProto()
            request.ParseFromString(entry)
            follower.ha_manager.apply(request)  # type: ignore[attr-defined]
        fsm = follower.finalization_state_manager
        assert (fsm.is_finalizing(), fsm.metadata_layout_version) == (True, 8)
        assert follower.upgrade_finalization_progress("c", False, True)[0] == "FINALIZATION_IN_PROGRESS"
        assert follower.pipeline_manager.creation_frozen

        steps: list[str] = []
        follower_submit = follower.ha_manager.submit_request

        async def recording(request: scm_ratis_pb2.SCMRatisRequestProto, **kwargs: object
                            ) -> scm_ratis_pb2.SCMRatisResponseProto:
            if request.type == scm_ratis_pb2.FINALIZE:
                steps.append(request.method.name)
            return await follower_submit(request)

        follower.ha_manager.submit_request = recording  # type: ignore[method-assign]
        for dn in dns:  # datanodes report to every SCM
            await dn.register(follower)
        follower.finalization_manager.sleep = time_passing(follower, dns, [])
        follower.on_leader_ready()  # it leads now: it resumes where the old leader stopped
        await follower.finalization_manager.wait()

        # no second mark, layout 8 not again: 9, 10, then the mark removed
        assert steps == ["finalizeLayoutFeature", "finalizeLayoutFeature", "removeFinalizingMark"]
        assert fsm.metadata_layout_version == 10 and not fsm.is_finalizing()
        assert follower.upgrade_finalization_progress("c", False, True) == ("FINALIZATION_DONE", [])
        assert health(follower) == ["HEALTHY"] * 3
        assert SCMStorageConfig(tmp_path / "follower").layout_version == 10
        # the new leader's messages go to whoever takes over monitoring
        status, messages = follower.upgrade_finalization_progress("client-2", True, False)
        assert status == "FINALIZATION_DONE" and messages[-1] == "Finalization is done."
    finally:
        await leader.stop()
        await follower.stop()
