"""Token buckets bounding the work anonymous callers can make an SCM do (pure: time is passed in).

Who calls it: the security servicer, before it parses anything of an enrolment request
(``GetSCMCertificate``, ``GetDataNodeCertificate``, ``GetOMCertificate``). Each source (the peer's IP
address) has a bucket of ``per_source_burst`` tokens refilled at ``per_source_rate`` per second, and
all sources together share one of ``total_burst`` refilled at ``total_rate``. A request takes one
token from its source's bucket first and only then one from the shared one, so a single noisy source
exhausts its own bucket without draining the capacity other sources enrol with.

The number of source buckets is bounded (``max_sources``): full buckets are forgotten first (a full
bucket is what a new source gets anyway), and if every tracked source is still draining, an unknown
source is refused as if the shared bucket were empty.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict


@dataclasses.dataclass
class TokenBucket:
    rate: float  # tokens per second
    burst: float  # capacity
    tokens: float
    at_ms: int

    def refill(self, now_ms: int) -> None:
        if now_ms > self.at_ms:
            self.tokens = min(self.burst, self.tokens + (now_ms - self.at_ms) * self.rate / 1000.0)
            self.at_ms = now_ms

    def take(self, now_ms: int) -> bool:
        self.refill(now_ms)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        self.tokens = min(self.burst, self.tokens + 1.0)

    def full(self, now_ms: int) -> bool:
        self.refill(now_ms)
        return self.tokens >= self.burst


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""  # "source" or "total" when refused
    message: str = ""


class RateLimiter:
    def __init__(
        self,
        *,
        per_source_rate: float,
        per_source_burst: int,
        total_rate: float,
        total_burst: int,
        max_sources: int = 10_000,
        what: str = "enrolment",
        keys: str = "ozone.scm.security.enrollment.rate",
    ) -> None:
        if per_source_rate <= 0 or total_rate <= 0 or per_source_burst < 1 or total_burst < 1:
            raise ValueError("rates must be positive and bursts at least 1")
        self.per_source_rate = per_source_rate
        self.per_source_burst = per_source_burst
        self.total_rate = total_rate
        self.total_burst = total_burst
        self.max_sources = max_sources
        self.what = what
        self.keys = keys
        self._total: TokenBucket | None = None
        self._sources: OrderedDict[str, TokenBucket] = OrderedDict()
        self.refused = {"source": 0, "total": 0}

    def _source_bucket(self, source: str, now_ms: int) -> TokenBucket | None:
        bucket = self._sources.get(source)
        if bucket is not None:
            self._sources.move_to_end(source)
            return bucket
        if len(self._sources) >= self.max_sources:
            for key in list(itertools.islice(self._sources, max(16, self.max_sources // 16))):
                if self._sources[key].full(now_ms):
                    del self._sources[key]
            if len(self._sources) >= self.max_sources:
                return None
        bucket = TokenBucket(self.per_source_rate, self.per_source_burst, float(self.per_source_burst), now_ms)
        self._sources[source] = bucket
        return bucket

    def acquire(self, source: str, now_ms: int) -> Decision:
        if self._total is None:
            self._total = TokenBucket(self.total_rate, self.total_burst, float(self.total_burst), now_ms)
        bucket = self._source_bucket(source, now_ms)
        if bucket is None or not bucket.take(now_ms):
            self.refused["source"] += 1
            return Decision(
                False,
                "source",
                f"too many {self.what} requests from {source}: at most {self.per_source_rate:g}/s "
                f"(burst {self.per_source_burst}) per source ({self.keys}.per.source[.burst]); retry later",
            )
        if not self._total.take(now_ms):
            bucket.give_back()
            self.refused["total"] += 1
            return Decision(
                False,
                "total",
                f"too many {self.what} requests on this SCM: at most {self.total_rate:g}/s "
                f"(burst {self.total_burst}) from all sources ({self.keys}.total[.burst]); retry later",
            )
        return Decision(True)

    @property
    def tracked_sources(self) -> int:
        return len(self._sources)
