"""ContainerReplicaPendingOps keeps a per-(datanode, op) counter so the ReplicationManager's
per-datanode limit check and target load are O(1) instead of a scan of every in-flight op.
This property test drives add/complete/expire/clear at random and checks the counter always
equals a brute-force count over the ops still pending."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.container.replication.replication_manager import ContainerReplicaPendingOps, PendingOpType

DNS = ["dn1", "dn2", "dn3"]
KINDS = [PendingOpType.ADD, PendingOpType.DELETE]

actions = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 4), st.sampled_from(KINDS), st.sampled_from(DNS), st.integers(0, 20)),
        st.tuples(st.just("complete"), st.integers(1, 4), st.booleans(), st.sampled_from(DNS)),
        st.tuples(st.just("expire"), st.integers(0, 20)),
        st.tuples(st.just("clear")),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(steps=actions)
def test_per_datanode_counts_match_a_full_scan(steps: list[tuple[object, ...]]) -> None:
    ops = ContainerReplicaPendingOps()
    for step in steps:
        if step[0] == "add":
            _, cid, kind, dn, deadline = step
            ops.add(cid, kind, dn, float(deadline))  # type: ignore[arg-type]
        elif step[0] == "complete":
            _, cid, added, dn = step
            ops.complete(cid, dn, added)  # type: ignore[arg-type]
        elif step[0] == "expire":
            ops.expire(float(step[1]))  # type: ignore[arg-type]
        else:
            ops.clear()
        for dn in DNS:
            for kind in KINDS:
                brute = sum(1 for per in ops._ops.values() for o in per if o.datanode == dn and o.op is kind)
                assert ops.count_for(dn, kind) == brute
        assert len(ops) == sum(ops.count_for(dn, kind) for dn in DNS for kind in KINDS)
