"""The order of the engine bench's sides (``bench --only real``), for its launched pairs
(``bench.run_real`` with ``--launched``) and for its blocks within one launch
(``worker._train_interleaved``) alike. Imports nothing heavy: the bench and every rank use it."""

from __future__ import annotations


def pair_order(repeat: int) -> tuple[str, str]:
    """Which implementation goes first in repeat ``repeat`` (0-based; a launched pair or a
    block pair): DDP (``default``) on even repeats, the engine (``lab``) on odd ones, so
    neither always gets the warmer or the colder slot of a pair."""
    return ("default", "lab") if repeat % 2 == 0 else ("lab", "default")


def run_order(repeat: int, control: bool = False) -> tuple[str, ...]:
    """Repeat ``repeat``'s sides in order: its pair (``pair_order``) and, with ``control``, a
    second DDP (``control``) next to the pair's DDP, on the side away from the engine's
    (control, DDP, engine / engine, DDP, control): the control pair is adjacent like the
    engine's, and its DDP alternates first and second like the engine's."""
    pair = pair_order(repeat)
    if not control:
        return pair
    return ("control", *pair) if pair[0] == "default" else (*pair, "control")
