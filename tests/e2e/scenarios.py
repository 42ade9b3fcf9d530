"""The operator's scenario list, one for every tier that runs the scenarios against a Kubernetes API.

The scenarios are the ``test_*`` coroutine functions of ``tests/e2e/local/test_operator_scenarios.py``, each taking a
work directory and getting its cluster from that module's ``environment`` (the emulator there). The other tiers run
the same functions, not copies, with ``environment`` replaced by their own: ``tests/e2e/controlplane`` (a real
control plane, ``make e2e-control-plane``), ``tests/e2e/node`` (a real single node built from sources, ``make
e2e-node-scenarios``) and ``tests/e2e/kind`` (a kind cluster, ``make e2e-kind``). A scenario
added to that module is in every tier's list at once; ``tests/e2e/test_scenario_lists.py`` checks that the tiers
parametrise exactly this list.

Scenarios marked ``control_plane`` need Kubernetes' own controllers (CronJob, Job), which the emulator does not
run: the emulator tier never selects them, the others run them like the rest.
"""

from __future__ import annotations

import inspect

from tests.e2e.local import test_operator_scenarios as module


def _scenarios() -> list[str]:
    found = [(fn.__code__.co_firstlineno, name) for name, fn in vars(module).items()
             if name.startswith("test_") and inspect.iscoroutinefunction(fn)]
    return [name for _, name in sorted(found)]


# In source order, so the lighter scenarios written first run first.
SCENARIOS: list[str] = _scenarios()
