"""combine_views: `admin scm roles` from every SCM's own answer (pure)."""

from __future__ import annotations

import pytest

from scm_server.client.errors import SCMUnavailableError
from scm_server.client.ha_admin import combine_views
from scm_server.proto import scm_ha_pb2

G = {"p1": "h1:9895", "p2": "h2:9895", "p3": "h3:9895"}


def view(me: str, leader: str, term: int, role: str, commit: int = 10, applied: int = 10,
         roles: dict[str, str] | None = None) -> scm_ha_pb2.ScmRatisRolesResponseProto:
    resp = scm_ha_pb2.ScmRatisRolesResponseProto(answeredBy=me, leaderId=leader, term=term, commitIndex=commit,
                                                 appliedIndex=applied, selfRole=role, answeredByNode="n" + me[1:])
    for peer, address in G.items():
        p = resp.peers.add(host=address.split(":")[0], ratisPort=9894, peerId=peer, nodeId="n" + peer[1:],
                           grpcAddress=address, role=(roles or {}).get(peer, "LEADER" if peer == leader else "FOLLOWER"))
        if me == leader:
            p.matchIndex, p.lag = commit, 0
    return resp


def by_peer(roles):  # type: ignore[no-untyped-def]
    return {p.peer_id: p for p in roles.peers}


def test_a_dead_scm_is_unknown_never_follower() -> None:
    answers = {G["p1"]: view("p1", "p1", 5, "LEADER"), G["p2"]: view("p2", "p1", 5, "FOLLOWER")}
    roles = combine_views(list(G.values()), answers, 2.0)
    p = by_peer(roles)
    assert (p["p1"].role, p["p2"].role, p["p3"].role) == ("LEADER", "FOLLOWER", "UNKNOWN")
    assert not p["p3"].answered and "no answer within 2s" in p["p3"].note
    assert p["p3"].lag == 0  # the leader's view of its progress is still shown
    assert roles.leader_id == "p1" and (roles.asked, roles.answers) == (3, 2)


def test_a_thawed_old_leader_and_a_restarted_scm_are_marked() -> None:
    answers = {
        G["p1"]: view("p1", "p1", 4, "LEADER"),  # frozen in term 4, just resumed
        G["p2"]: view("p2", "p2", 6, "LEADER"),
        G["p3"]: view("p3", "", 1, "FOLLOWER", commit=0, applied=0, roles={"p1": "FOLLOWER", "p2": "FOLLOWER"}),
    }
    roles = combine_views(list(G.values()), answers, 2.0)
    p = by_peer(roles)
    assert roles.leader_id == "p2" and roles.term == 6
    assert "stale: claims to lead in term 4" in p["p1"].note
    assert p["p3"].role == "FOLLOWER" and "behind: term 1 < 6" in p["p3"].note
    # the restarted SCM's view of the others was not used
    assert p["p2"].role == "LEADER" and p["p2"].lag == 0


def test_only_the_leader_asked_keeps_its_view_of_the_others() -> None:
    """The operator asks the leader alone: the members it did not ask keep the leader's view."""
    roles = combine_views(["10.0.0.1:9895"], {"10.0.0.1:9895": view("p1", "p1", 5, "LEADER",
                                                                       roles={"p3": "LEARNER"})}, 2.0)
    p = by_peer(roles)
    assert roles.answered_by == roles.leader_id == "p1"
    assert (p["p2"].role, p["p3"].role) == ("FOLLOWER", "LEARNER")
    assert "not asked" in p["p2"].note and not p["p2"].answered


def test_no_answer_at_all_is_one_clear_error() -> None:
    with pytest.raises(SCMUnavailableError, match="no SCM answered GetScmRatisRoles within 2s"):
        combine_views(list(G.values()), {}, 2.0)
