"""How long a reconcile loop waits after a failed pass: growing, jittered, and never shorter than the API server asked.

Pure (no clock, no randomness module): the caller passes the number of failures in a row, the server's
``Retry-After`` when it sent one (HTTP 429 Too Many Requests from API Priority and Fairness, or 503), and a uniform
draw from [0, 1). The delay doubles from ``base`` with each failure up to ``cap`` ("equal jitter": half of it fixed,
half drawn), so operators that failed together do not retry together; a ``Retry-After`` is a floor, as Kubernetes'
own clients treat it. A success resets the count (the caller's part).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    cap: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.cap:
            raise ValueError(f"back-off needs 0 < base <= cap, got base={self.base} cap={self.cap}")

    def delay(self, failures: int, draw: float, retry_after: float | None = None) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 for the first)."""
        if failures < 1:
            raise ValueError(f"failures counts from 1, got {failures}")
        if not 0.0 <= draw < 1.0:
            raise ValueError(f"draw must be in [0, 1), got {draw}")
        ceiling = min(self.cap, self.base * 2.0 ** min(failures - 1, 62))
        wait = ceiling / 2 + draw * ceiling / 2
        if retry_after is not None and retry_after > wait:
            return retry_after
        return wait
