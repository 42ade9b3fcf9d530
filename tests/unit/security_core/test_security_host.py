"""The CA runtime reads the ring through its host's HA manager (``SecurityHost.ha_manager``): every member by its
Raft peer id and by its node id, a member the running configuration cannot name found by its Raft address in the
site's SCM list, nothing without a ring. No facade here: the host is a view of a ring of three."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from scm_server.ca.scm_security import SCMSecurity
from scm_server.conf import SCMHAConfig, SCMNodeDetails
from scm_server.conf.security import SecurityConfig
from scm_server.metadata import SCMStorageConfig
from scm_server.raft.core.types import ConfState
from scm_server.security import init as sec_init

from .pki_helpers import secure_scm_conf

HA = {
    "ozone.scm.service.ids": "svc",
    "ozone.scm.nodes.svc": "scm1,scm2,scm3",
    "ozone.scm.node.id": "scm1",
    "ozone.scm.address.svc.scm1": "h1",
    "ozone.scm.address.svc.scm2": "h2",
    "ozone.scm.address.svc.scm3": "h3",
}


@dataclasses.dataclass
class RingView:
    """The HA manager as far as the CA runtime reads the ring (None: no Raft)."""

    ring: ConfState | None
    known: dict[str, SCMNodeDetails]

    def ring_membership(self) -> ConfState | None:
        return self.ring

    def node_of_peer(self, peer_id: str) -> SCMNodeDetails | None:
        return self.known.get(peer_id)


@pytest.fixture
def security(tmp_path: Path) -> SCMSecurity:
    conf = secure_scm_conf(tmp_path, b"d" * 40, **HA)
    cluster_id, scm_id = "CID-" + str(uuid.uuid4()), str(uuid.uuid4())
    serial = sec_init.initialize_primordial(SecurityConfig.from_conf(conf), metadata_dir=tmp_path / "meta",
                                            cluster_id=cluster_id, scm_id=scm_id, hostname="h1")
    storage = SCMStorageConfig(tmp_path / "meta")
    storage.set_scm_cert_serial_id(serial)
    storage.initialize(cluster_id=cluster_id, scm_id=scm_id, primary_scm_node_id=scm_id, scm_ha=True)
    loaded = SCMSecurity.load(conf, storage)
    assert loaded is not None
    return loaded


def test_members_by_peer_id_by_node_id_and_by_raft_address(security: SCMSecurity) -> None:
    nodes = {n.node_id: n for n in SCMHAConfig.from_conf(security.conf).nodes}
    ring = ConfState(voters=("p1", "p2"), learners=("p3",),
                     addresses=(("p1", nodes["scm1"].ratis_address), ("p2", nodes["scm2"].ratis_address),
                                ("p3", nodes["scm3"].ratis_address)))
    # p3 joined after this member loaded its configuration: only its address names it
    security.scm = SimpleNamespace(ha_manager=RingView(ring, {"p1": nodes["scm1"], "p2": nodes["scm2"]}))  # type: ignore[assignment]
    assert security._member_ids() == {
        "p1": "p1", "p2": "p2", "p3": "p3", "scm1": "p1", "scm2": "p2", "scm3": "p3",
    }


def test_a_member_at_an_address_no_scm_has_is_known_by_its_peer_id_only(security: SCMSecurity) -> None:
    ring = ConfState(voters=("p9",), addresses=(("p9", "elsewhere:9894"),))
    security.scm = SimpleNamespace(ha_manager=RingView(ring, {}))  # type: ignore[assignment]
    assert security._member_ids() == {"p9": "p9"}


def test_no_ring_no_members(security: SCMSecurity) -> None:
    assert security._member_ids() == {}  # not attached yet
    security.scm = SimpleNamespace(ha_manager=RingView(None, {}))  # type: ignore[assignment]
    assert security._member_ids() == {}
