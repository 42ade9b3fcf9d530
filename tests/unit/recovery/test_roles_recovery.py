"""`admin scm roles --recovery`: each answering SCM's last index and term, and the most up to date."""

from __future__ import annotations

from scm_server.client.ha_admin import combine_views
from scm_server.proto import scm_ha_pb2


def _view(peer: str, last_index: int, last_term: int, all_peers: list[str]) -> scm_ha_pb2.ScmRatisRolesResponseProto:
    v = scm_ha_pb2.ScmRatisRolesResponseProto(
        answeredBy=peer, term=5, commitIndex=100, appliedIndex=100, selfRole="CANDIDATE",
        lastIndex=last_index, lastTerm=last_term,
    )
    for i, p in enumerate(all_peers):
        v.peers.append(scm_ha_pb2.ScmPeerRoleProto(host="h", ratisPort=i, role="FOLLOWER", peerId=p))
    return v


def test_most_up_to_date_is_by_last_term_then_index() -> None:
    peers = ["a", "b", "c"]
    answers = {"x:1": _view("a", 120, 4, peers), "x:2": _view("b", 110, 5, peers)}
    roles = combine_views(["x:1", "x:2", "x:3"], answers, 2.0)
    best = roles.most_up_to_date
    assert best is not None and best.peer_id == "b"  # a higher last term wins over a longer log
    by_peer = {p.peer_id: p for p in roles.peers}
    assert (by_peer["a"].last_index, by_peer["a"].last_term) == (120, 4)
    assert by_peer["c"].answered is False and by_peer["c"].last_index is None
    answers = {"x:1": _view("a", 120, 5, peers), "x:2": _view("b", 110, 5, peers)}
    best = combine_views(["x:1", "x:2", "x:3"], answers, 2.0).most_up_to_date
    assert best is not None and best.peer_id == "a"
