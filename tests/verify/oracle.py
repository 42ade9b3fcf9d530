"""Brute-force linearizability oracle for the hypothesis cross-checks of the search (tests only).

Tries every order of a small history that respects real time and replays it on the model;
exponential, so only for the handful of operations hypothesis draws.
"""

from __future__ import annotations

import itertools
from typing import Any

from scm_server.verify import Model, Operation


def brute_force_linearizable(ops: list[Operation], model: Model) -> bool:
    ops = [o for o in ops if not (o.indeterminate and model.is_read_only(o.input))]
    n = len(ops)
    for perm in itertools.permutations(range(n)):
        pos = {i: k for k, i in enumerate(perm)}
        # real-time order: if a returns before b is called, a precedes b
        if any(ops[a].ret < ops[b].call and pos[a] > pos[b] for a in range(n) for b in range(n)):
            continue
        state: Any = model.init()
        legal = True
        for i in perm:
            legal, state = model.step(state, ops[i].input, ops[i].output)
            if not legal:
                break
        if legal:
            return True
    return n == 0
