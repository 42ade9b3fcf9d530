"""The long simulation tier (``make soak``): millions of random-walk steps over many seeds.

Environment:
* ``SIM_SEEDS``: seeds to run, e.g. ``1000-1199`` or ``5,17,42`` (default: as many seeds from
  10000 on as ``SIM_SOAK_STEPS`` needs);
* ``SIM_SOAK_STEPS``: total simulated steps (default 5,000,000);
* ``SIM_WALK_STEPS``: steps per walk (default 50,000).

Each walk alternates 3- and 5-node clusters and cycles through the option profiles of
``walk.PROFILES`` with the full fault and membership mix, checks every
invariant after every step, then heals, converges (liveness) and checks durability. The first
failing seed is reported with its last events; replay it with ``SIM_SEED=<seed>`` (see
``test_random_walk.py::test_replay_seed``) or ``SIM_SEEDS=<seed>`` here.
"""

from __future__ import annotations

import os
import time

import pytest

from .invariants import InvariantViolation
from .walk import PROFILES, run_walk

# half the walks use SCM's settings, the rest cycle through the other profiles
PROFILE_CYCLE = [
    "default", "plain", "default", "prevote-only", "default", "checkquorum-only", "default", "tight", "default", "roomy"
]

# every fifth walk is crash-, election- and partition-heavy
CRASHY = {"crash": 6.0, "restart": 4.0, "campaign": 8.0, "partition": 3.0, "drop": 2.0, "transfer": 3.0}


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    return seeds


def test_parse_seeds() -> None:
    assert parse_seeds("1-3, 7,9-9") == [1, 2, 3, 7, 9]


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)  # a long run by design; the default 300 s applies to make test
def test_soak_random_walks() -> None:
    total = int(os.environ.get("SIM_SOAK_STEPS", 5_000_000))
    per_walk = int(os.environ.get("SIM_WALK_STEPS", 50_000))
    seeds = parse_seeds(os.environ.get("SIM_SEEDS", ""))
    if not seeds:
        seeds = list(range(10_000, 10_000 + max(1, total // per_walk)))
    t0 = time.monotonic()
    steps = 0
    for k, seed in enumerate(seeds):
        try:
            profile = PROFILE_CYCLE[k % len(PROFILE_CYCLE)]
            boost = CRASHY if k % 5 == 4 else None
            c = run_walk(seed, per_walk, 5 if k % 2 else 3, options=PROFILES[profile], boost=boost)
        except InvariantViolation as exc:
            raise AssertionError(
                f"soak walk failed at seed {seed} (profile {profile}, {5 if k % 2 else 3} nodes; after {steps:,} "
                f"steps in earlier walks)\n{exc}"
            ) from exc
        steps += c.step_no
        if k % 10 == 9:
            print(f"soak: {steps:,} steps, {k + 1} seeds, {time.monotonic() - t0:.0f}s", flush=True)
    print(f"soak: {steps:,} steps over {len(seeds)} seeds in {time.monotonic() - t0:.0f}s")
