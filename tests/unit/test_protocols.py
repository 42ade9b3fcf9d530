"""The SCM's faces (scm_server.protocols) hold for the facade and for every fake the edge tests serve.

Twice: mypy checks this file (``make lint``), so the annotated assignments below fail type checking when the facade or
a fake loses a method of a face or changes its shape (sync for async, a parameter more); and at runtime each is an
instance of each ``runtime_checkable`` face, with its coroutine methods still coroutines (what the edges await).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from scm_state_harness import make_scm

from scm_server import protocols
from scm_server.ca.scm_security import RegisteredDatanodes, SecurityHost
from scm_server.ha.scm_ha_manager import SCMHAManagerImpl
from scm_server.ha.scm_ha_manager_api import SCMHAHost, SCMHAManager
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ozone_beans import BeanSource
from scm_server.protocols import (
    LeaderRole,
    ScmBlockLocationProtocol,
    SCMSecurityProtocol,
    ScmStatusView,
    StorageContainerDatanodeProtocol,
    StorageContainerLocationProtocol,
)
from scm_server.scm import StorageContainerManager
from tests.unit.edges.fakes import FakeSCM

FACES: list[type[LeaderRole] | type[ScmStatusView]] = [
    ScmBlockLocationProtocol,
    StorageContainerLocationProtocol,
    StorageContainerDatanodeProtocol,
    SCMSecurityProtocol,
    ScmStatusView,
]


def faces_of_the_facade(scm: StorageContainerManager) -> list[object]:
    """Type-checked only: the facade is each face."""
    block: ScmBlockLocationProtocol = scm
    location: StorageContainerLocationProtocol = scm
    datanode: StorageContainerDatanodeProtocol = scm
    security: SCMSecurityProtocol = scm
    status: ScmStatusView = scm
    return [block, location, datanode, security, status]


def faces_of_the_facade_inside(scm: StorageContainerManager) -> list[object]:
    """Type-checked only: what the runtimes beside the edges hold of the facade (the HA manager its host, the CA
    runtime its security host, the registered datanodes in it)."""
    ha_host: SCMHAHost = scm
    security_host: SecurityHost = scm
    beans: BeanSource = scm
    datanodes: RegisteredDatanodes = scm.node_manager
    return [ha_host, security_host, beans, datanodes]


def ha_managers(raft: SCMHAManagerImpl, single: SCMHAManagerStub) -> list[SCMHAManager]:
    """Type-checked only: both HA managers are the facade's SCMHAManager."""
    return [raft, single]


def faces_of_the_fake(scm: FakeSCM) -> list[object]:
    """Type-checked only: the edge tests' fake is each face."""
    block: ScmBlockLocationProtocol = scm
    location: StorageContainerLocationProtocol = scm
    datanode: StorageContainerDatanodeProtocol = scm
    security: SCMSecurityProtocol = scm
    status: ScmStatusView = scm
    return [block, location, datanode, security, status]


def _async_methods(face: type) -> set[str]:
    return {name for name, member in vars(face).items() if inspect.iscoroutinefunction(member)}


def _sync_methods(face: type) -> set[str]:
    return {
        name for name, member in vars(face).items()
        if inspect.isfunction(member) and not inspect.iscoroutinefunction(member) and not name.startswith("_")
    }


def _assert_is_face(scm: object, face: type) -> None:
    assert isinstance(scm, face), f"{type(scm).__name__} is not a {face.__name__}"
    for name in _async_methods(face):
        assert inspect.iscoroutinefunction(getattr(scm, name)), f"{type(scm).__name__}.{name} must be async"
    for name in _sync_methods(face):
        assert not inspect.iscoroutinefunction(getattr(scm, name)), f"{type(scm).__name__}.{name} must be plain"


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.__name__)
def test_the_edge_fake_is_every_face_with_its_sync_and_async_shape(face: type) -> None:
    _assert_is_face(FakeSCM(), face)
    assert faces_of_the_fake(FakeSCM())  # the type-checked assignments also run


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.__name__)
async def test_the_facade_is_every_face_with_its_sync_and_async_shape(face: type, tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    try:
        _assert_is_face(scm, face)
        assert faces_of_the_facade(scm)
    finally:
        await scm.stop()


def test_a_fake_missing_a_method_is_not_the_face() -> None:
    """The runtime check can fail: an object without the block protocol's allocation is not that face."""

    class Partial:
        def require_leader(self) -> None: ...
        def is_leader_ready(self) -> bool: return True
        def answer_label(self) -> tuple[str, str, str]: return ("x", "LEADER", "")
        def node_id_of_peer(self, peer_id: str) -> str: return peer_id

    assert isinstance(Partial(), LeaderRole)
    assert not isinstance(Partial(), ScmBlockLocationProtocol)


def test_each_ozone_protocol_has_its_face() -> None:
    """Ozone's four interfaces, by their names."""
    assert {
        "ScmBlockLocationProtocol", "StorageContainerLocationProtocol", "StorageContainerDatanodeProtocol",
        "SCMSecurityProtocol",
    } <= set(vars(protocols))


INNER_FACES: list[type] = [SCMHAHost, SecurityHost, BeanSource]


@pytest.mark.parametrize("face", INNER_FACES, ids=lambda f: f.__name__)
async def test_the_facade_is_what_its_ha_manager_and_ca_runtime_hold(face: type, tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    try:
        _assert_is_face(scm, face)
        assert isinstance(scm.node_manager, RegisteredDatanodes)
        _assert_is_face(scm.ha_manager, SCMHAManager)  # the single SCM's stub
        assert faces_of_the_facade_inside(scm)
    finally:
        await scm.stop()


def test_an_object_lacking_the_registered_datanodes_is_not_a_security_host() -> None:
    """The runtime check can fail: a host without its node manager is refused."""

    class NoDatanodes:
        clock = node_id = certificate_store = sequence_id_generator = None
        scm_context = service_manager = metrics_registry = ha_manager = None

    assert not isinstance(NoDatanodes(), SecurityHost)
    NoDatanodes.node_manager = None  # type: ignore[attr-defined]
    assert isinstance(NoDatanodes(), SecurityHost)
