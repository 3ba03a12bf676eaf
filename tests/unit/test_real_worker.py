"""runners.real.worker's process helpers (the ranks' own setup before their timed loop)."""

import gc

from runners.real.worker import settle_gc


def test_settle_gc_freezes_the_heap_so_a_full_collection_scans_only_what_came_after():
    """Everything alive before the timed loop goes to the permanent generation (a full
    collection no longer scans it: the 0.1-0.2 s stall every rank took at once); the
    collector stays on and still frees what the loop leaves in cycles."""
    before = [[i] for i in range(1000)]  # tracked containers, alive across the call
    try:
        settle_gc()
        frozen = gc.get_freeze_count()
        assert frozen >= len(before) and gc.isenabled()
        cycle: list = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # a cycle made after the freeze is still collected
        assert gc.get_freeze_count() == frozen  # the frozen heap stays frozen
    finally:
        gc.unfreeze()
    assert before[999] == [999]
