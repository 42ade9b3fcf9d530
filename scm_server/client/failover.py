"""The decision core of ``SCMClient``'s failover: which SCM to try next, how long to pause, when to give up.

Pure and deterministic (no I/O, no clock: every method takes ``now``), so the policy is unit- and
property-tested without sockets; :class:`scm_server.client.scm_client.SCMClient` feeds it the
outcome of each attempt and does what it says. It must not learn about gRPC.

The rules:

* **Suspects.** An SCM that did not answer (refused, unreachable, frozen: no answer to the liveness
  PINGs, no connection within the connect deadline) is skipped for ``suspect_for`` seconds while
  another SCM is available. A NotLeader hint naming an SCM already tried in this round, or one
  that became a suspect less than ``stale_hint_for`` seconds ago (one election timeout), is not
  followed: the followers of a frozen leader keep naming it until they elect a new one, and going
  back to it would cost another liveness timeout per round instead of asking the others again.
  Later than that, a hint naming a suspect is followed: the followers have had time to elect, so
  they name it because it won (an SCM frozen a moment ago, resumed, and elected after the next
  leader was killed).
* **Rounds.** Other failures move to the next usable SCM at once; after every usable SCM was tried
  in a row the client pauses ``retry_interval`` (``hdds.scmclient.failover.retry.interval``). A hint
  to a healthy SCM is followed at once.
* **Budget.** The client gives up after ``max_retries`` failed attempts
  (``hdds.scmclient.failover.max.retry``) but never before ``min_window`` seconds of failures: the
  window is two elections (randomised to [T, 2T) each, so ``4 x`` the election timeout), so a
  failover always has time to complete whatever the retry settings (the local cluster's
  15 x 200 ms alone did not cover it). The overall deadline (``hdds.scmclient.rpc.timeout``) is
  enforced by the caller.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class FailoverPolicy:
    addresses: list[str]
    max_retries: int
    retry_interval: float
    min_window: float
    suspect_for: float
    current: int = 0
    attempts: int = 0
    failovers: int = 0
    first_failure: float | None = None
    suspects: dict[str, float] = dataclasses.field(default_factory=dict)  # address -> suspect until
    stale_hint_for: float | None = None  # None: as long as the suspicion lasts
    suspected_at: dict[str, float] = dataclasses.field(default_factory=dict)  # address -> suspect since
    _tried: set[str] = dataclasses.field(default_factory=set)  # tried since the last pause

    def __post_init__(self) -> None:
        if not self.addresses:
            raise ValueError("FailoverPolicy needs at least one address")

    @property
    def address(self) -> str:
        return self.addresses[self.current]

    def is_suspect(self, address: str, now: float) -> bool:
        until = self.suspects.get(address)
        if until is None:
            return False
        if now >= until:
            del self.suspects[address]
            return False
        return True

    def begin_call(self, now: float) -> str:
        """The address to try first for a new call: the current one unless it is a suspect and
        another SCM is not."""
        self.attempts = 0
        self.first_failure = None
        self._tried.clear()
        if self.is_suspect(self.address, now):
            for step in range(1, len(self.addresses)):
                i = (self.current + step) % len(self.addresses)
                if not self.is_suspect(self.addresses[i], now):
                    self.current = i
                    break
        return self.address

    def on_success(self, address: str) -> None:
        self.suspects.pop(address, None)
        self.attempts = 0
        self.first_failure = None
        self._tried.clear()

    def exhausted(self, now: float) -> bool:
        """True once the retry budget is spent (attempts AND the minimum failover window)."""
        if self.first_failure is None:
            return False
        return self.attempts > self.max_retries and now - self.first_failure >= self.min_window

    def _failed(self, now: float) -> None:
        self.attempts += 1
        self.failovers += 1
        if self.first_failure is None:
            self.first_failure = now

    def on_unreachable(self, address: str, now: float) -> float:
        """``address`` did not answer. Returns the pause before the next attempt."""
        self._failed(now)
        self.suspects[address] = now + self.suspect_for
        self.suspected_at[address] = now
        return self._advance(address, now)

    def _stale_hint(self, hint: str, now: float) -> bool:
        """A hint naming ``hint`` may still be the followers' view from before they noticed it fail."""
        if not self.is_suspect(hint, now):
            return False
        if self.stale_hint_for is None:
            return True
        return now - self.suspected_at.get(hint, now) < self.stale_hint_for

    def on_not_leader(self, address: str, hint: str | None, now: float) -> float:
        """``address`` answered SCM_NOT_LEADER (with the leader's address as ``hint``, if known)."""
        self._failed(now)
        self.suspects.pop(address, None)  # it answered: alive
        if hint and hint != address and hint not in self._tried and not self._stale_hint(hint, now):
            if hint not in self.addresses:
                self.addresses.append(hint)
            self._tried.add(address)
            self.current = self.addresses.index(hint)
            return 0.0
        return self._advance(address, now)

    def _advance(self, failed: str, now: float) -> float:
        self._tried.add(failed)
        n = len(self.addresses)
        for step in range(1, n + 1):
            i = (self.current + step) % n
            candidate = self.addresses[i]
            if candidate not in self._tried and not self.is_suspect(candidate, now):
                self.current = i
                return 0.0
        # Every usable SCM was tried in a row: pause, then start a new round.
        self._tried.clear()
        usable = [
            (self.current + step) % n
            for step in range(1, n + 1)
            if not self.is_suspect(self.addresses[(self.current + step) % n], now)
        ]
        if usable:
            self.current = usable[0]
        else:  # everyone is a suspect: the one whose suspicion ends first
            self.current = min(range(n), key=lambda i: self.suspects.get(self.addresses[i], now))
        return self.retry_interval
