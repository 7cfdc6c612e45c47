"""``gctune.settle``: what is alive goes to the permanent generation, garbage does not, and young
collections run less often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from hami.core import gctune


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector can free it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_live_objects_are_frozen_and_cyclic_garbage_is_collected_first(unfrozen: None) -> None:
    kept = Node()
    dropped = Node()
    gone = weakref.ref(dropped)
    del dropped
    before = gc.get_freeze_count()
    gctune.settle("a test")
    assert gone() is None  # collected before the freeze, not kept alive by it
    assert gc.get_freeze_count() > before
    assert not any(o is kept for o in gc.get_objects())  # frozen objects are out of every generation
    gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


def test_young_collections_run_less_often_and_the_older_thresholds_stay(unfrozen: None) -> None:
    gc.set_threshold(700, 11, 12)
    gctune.settle("a test")
    assert gc.get_threshold() == (gctune.YOUNG_THRESHOLD, 11, 12)
