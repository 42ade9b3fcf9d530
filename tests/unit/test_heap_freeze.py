"""scm_server.ha.heap: frozen only once the daemon enabled it; young garbage collected before freezing."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from scm_server.ha import heap


@pytest.fixture
def fresh_heap_module() -> Iterator[None]:
    enabled = heap._enabled
    heap._enabled = False
    try:
        yield
    finally:
        heap._enabled = enabled
        gc.unfreeze()


def test_after_load_does_nothing_until_the_daemon_enables_it(fresh_heap_module: None) -> None:
    gc.unfreeze()
    heap.after_load()
    assert gc.get_freeze_count() == 0 and not heap.is_enabled()


def test_enable_freezes_the_loaded_heap_and_every_later_load(fresh_heap_module: None) -> None:
    gc.unfreeze()

    class Node:
        def __init__(self) -> None:
            self.me = self  # a garbage cycle: must be collected, not frozen

    loaded = [object() for _ in range(1000)]
    garbage = weakref.ref(Node())
    assert garbage() is not None  # a cycle: reference counting alone does not free it
    heap.enable()
    first = gc.get_freeze_count()
    assert heap.is_enabled() and first >= len(loaded)
    assert garbage() is None, "a young garbage cycle was frozen instead of collected"
    more = [[i] for i in range(1000)]
    assert all(id(m) in {id(o) for o in gc.get_objects()} for m in more[:1])  # tracked before
    heap.after_load()
    # frozen: out of every generation the collector walks (a count would be fragile: frozen objects of earlier
    # tests may be freed by reference counting meanwhile)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(m) in tracked for m in more), "objects loaded after enable() were not frozen"


def test_disable_gives_the_frozen_heap_back(fresh_heap_module: None) -> None:
    gc.unfreeze()
    heap.enable()
    assert gc.get_freeze_count() > 0
    heap.disable()
    assert gc.get_freeze_count() == 0 and not heap.is_enabled()
    heap.after_load()
    assert gc.get_freeze_count() == 0
