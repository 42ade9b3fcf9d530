"""Fault injection for tests: storage failpoints and a network fault layer between peers.

Failpoints mark every persist point of :mod:`scm_server.raft.storage` (``before_save``,
``after_save``, ``before_snapshot_write``, ``after_snapshot_write``, ``before_snapshot_rename``,
``after_snapshot_rename``, ``before_purge``, ``after_purge``), mirroring etcd's
``raftBeforeSave``/``raftAfterSave`` family. They are armed two ways:

* in a child process through the environment: ``RAFT_FAILPOINT=after_save:3`` makes the 3rd hit of
  ``after_save`` call ``os._exit(1)`` (a crash: no flush, no cleanup), which is how the
  crash-consistency tests kill a writer at an exact point;
* in-process with :func:`arm` (raises :class:`FailpointError` on the n-th hit).

:class:`NetworkFaults` sits in the transport (the kernel here has no netem): per-destination drop
probability, added delay, one-way cut and full partition, with seeded randomness so a failing run
can be replayed. It is off unless ``RaftServerConfig.enable_fault_injection`` is set, and tests
drive it through the admin RPC ``SetFaults``/``ClearFaults``.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass

FAILPOINTS = (
    "before_save",
    "after_save",
    "before_snapshot_write",
    "after_snapshot_write",
    "before_snapshot_rename",
    "after_snapshot_rename",
    "before_purge",
    "after_purge",
)

ENV_VAR = "RAFT_FAILPOINT"


class FailpointError(RuntimeError):
    """Raised by an in-process failpoint (simulated crash at a persist point)."""


class _Failpoints:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: dict[str, int] = {}
        self._armed: dict[str, tuple[int, bool]] = {}  # name -> (nth hit, exit process?)
        spec = os.environ.get(ENV_VAR, "")
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, _, nth = item.partition(":")
            if name not in FAILPOINTS:
                raise ValueError(f"{ENV_VAR}: unknown failpoint {name!r}; known: {', '.join(FAILPOINTS)}")
            self._armed[name] = (int(nth or "1"), True)

    def arm(self, name: str, nth: int = 1, *, exit_process: bool = False) -> None:
        if name not in FAILPOINTS:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(FAILPOINTS)}")
        with self._lock:
            self._hits[name] = 0
            self._armed[name] = (nth, exit_process)

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()
            self._hits.clear()

    def hit(self, name: str) -> None:
        if not self._armed:
            return
        with self._lock:
            armed = self._armed.get(name)
            if armed is None:
                return
            count = self._hits.get(name, 0) + 1
            self._hits[name] = count
            nth, exit_process = armed
            if count != nth:
                return
            del self._armed[name]
        if exit_process:
            os._exit(1)
        raise FailpointError(f"failpoint {name} triggered (hit {count})")


_FAILPOINTS = _Failpoints()


def failpoint(name: str) -> None:
    """Mark a persist point. Free unless a failpoint is armed."""
    _FAILPOINTS.hit(name)


def arm(name: str, nth: int = 1, *, exit_process: bool = False) -> None:
    """Arm failpoint ``name`` to fire on its ``nth`` hit from now (raise, or ``os._exit(1)``)."""
    _FAILPOINTS.arm(name, nth, exit_process=exit_process)


def clear() -> None:
    _FAILPOINTS.clear()


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Faults applied to traffic between this node and ``peer`` ("*" = every peer)."""

    peer: str = "*"
    drop: float = 0.0  # probability an outbound message is dropped
    delay: float = 0.0  # seconds added to every outbound message
    jitter: float = 0.0  # extra uniform delay in [0, jitter)
    cut_outbound: bool = False  # one-way cut: nothing leaves towards `peer`
    cut_inbound: bool = False  # nothing from `peer` is accepted


class NetworkFaults:
    """The network fault layer between this node and its peers (see module docstring).

    A full partition between A and B is ``cut_outbound`` + ``cut_inbound`` for B on A (and the
    same for A on B, if both nodes should be configured; one side is enough to cut both ways).
    """

    def __init__(self, seed: int = 0) -> None:
        self._rules: dict[str, FaultRule] = {}
        self._rng = random.Random(seed)

    @property
    def active(self) -> bool:
        return bool(self._rules)

    def set_rules(self, rules: list[FaultRule], seed: int | None = None) -> None:
        self._rules = {r.peer: r for r in rules}
        if seed is not None:
            self._rng = random.Random(seed)

    def clear(self) -> None:
        self._rules = {}

    def rules(self) -> list[FaultRule]:
        return list(self._rules.values())

    def _rule(self, peer: str) -> FaultRule | None:
        return self._rules.get(peer) or self._rules.get("*")

    def outbound(self, peer: str) -> float | None:
        """Decide the fate of one outbound message to ``peer``: None = drop, else delay in seconds."""
        rule = self._rule(peer)
        if rule is None:
            return 0.0
        if rule.cut_outbound:
            return None
        if rule.drop > 0.0 and self._rng.random() < rule.drop:
            return None
        delay = rule.delay
        if rule.jitter > 0.0:
            delay += self._rng.random() * rule.jitter
        return delay

    def inbound_allowed(self, peer: str) -> bool:
        rule = self._rule(peer)
        return rule is None or not rule.cut_inbound
