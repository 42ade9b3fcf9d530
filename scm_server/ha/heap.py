"""Keep the SCM's loaded tables out of Python's full garbage collections.

Who calls it: the daemon (:mod:`scm_server.server.daemon`) calls :func:`enable` once its SCM has loaded
scm.db and started, which also freezes what is loaded by then, and :func:`disable` when it stops; :class:`~scm_server.ha.scm_state_machine.
SCMStateMachine` calls :func:`after_load` when a checkpoint install reloaded every manager.

Why: a full (generation 2) collection walks every tracked object. With 1M containers the loaded
table alone is over a million objects, and CPython runs a full collection each time the heap grows by a
quarter, so an SCM loading or receiving its first full reports paused for one to several seconds at a
time (measured in bench/scale.py: long enough for a leader to lose its followers and an election to
follow). ``gc.freeze()`` moves everything alive at that moment into the permanent generation, which the
collector skips; those objects are still freed by reference counting when dropped (container and
replica records hold no cycles).

What it must not do: freeze anything in processes other than the daemon (tests build many SCMs in
one process and rely on the collector), so :func:`after_load` does nothing until :func:`enable` ran.
"""

from __future__ import annotations

import gc

_enabled = False


def enable() -> None:
    """The daemon's SCM is loaded and serving: from now on, freeze after every full load."""
    global _enabled
    _enabled = True
    after_load()


def after_load() -> None:
    """A full load just finished: collect the young garbage, then freeze what is alive."""
    if not _enabled:
        return
    gc.collect(1)  # leave short-lived garbage cycles to the collector, not to the permanent generation
    gc.freeze()


def disable() -> None:
    """The daemon stopped (an in-process daemon in a test): give the frozen objects back to the collector."""
    global _enabled
    _enabled = False
    gc.unfreeze()


def is_enabled() -> bool:
    return _enabled
