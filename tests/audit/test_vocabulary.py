"""The audit's names are its own copy (the Spark job must not import SCM): pin them to SCM's.

A health state added to, renamed in or reordered in SCM's ReplicationManager without the audit
following would make the two disagree silently (every such container a VERDICT_MISMATCH, or a
primary state chosen differently); this fails first.
"""

from __future__ import annotations

from scm_audit import vocabulary as V
from scm_server.container.replication import health


def test_health_states_are_scms() -> None:
    assert set(V.HEALTH_STATES) == {s.value for s in health.ContainerHealthState}
    assert len(V.HEALTH_STATES) == len(set(V.HEALTH_STATES))


def test_primary_order_is_scms() -> None:
    assert tuple(s.value for s in health.PRIMARY_ORDER) == V.PRIMARY_ORDER


def test_finding_kinds_are_distinct_and_cover_every_unhealthy_state() -> None:
    assert len(V.FINDING_KINDS) == len(set(V.FINDING_KINDS))
    assert set(V.HEALTH_STATES) - {V.HEALTHY} <= set(V.FINDING_KINDS)
