"""runners.exact: the MILP optimum of one iteration's preemptive all-reduce schedule (PACE check).

Slot t is the interval [t, t+1); a task completes at the end of its last slot.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from runners.exact import (
    Instance,
    consumer_priority,
    optimal_makespan,
    priority_makespan,
    random_instance,
)


def chain(release, chunks, fwd, compute_free):
    n = len(fwd)
    return Instance(
        release=tuple(release),
        chunks=tuple(chunks),
        fwd=tuple(fwd),
        needs=tuple((j,) for j in range(n)),
        preds=((),) + tuple((j - 1,) for j in range(1, n)),
        compute_free=compute_free,
    )


def brute_force_makespan(inst: Instance) -> int:
    """Independent oracle for tiny instances: every channel schedule (each slot idle or given to
    a released unfinished task) within max(release) + sum(chunks) slots, then every topological
    op order run as early as possible (optimal for a fixed order on one machine)."""
    n_tasks, n_ops = len(inst.release), len(inst.fwd)
    horizon = max(inst.release) + sum(inst.chunks)
    completions: set[tuple[int, ...]] = set()

    def assign(t: int, left: tuple[int, ...], done: tuple[int, ...]) -> None:
        if not any(left):
            completions.add(done)
            return
        if sum(left) > horizon - t:
            return
        assign(t + 1, left, done)  # idle slot
        for c in range(n_tasks):
            if left[c] and inst.release[c] <= t:
                new_left = left[:c] + (left[c] - 1,) + left[c + 1 :]
                new_done = done[:c] + (t + 1,) + done[c + 1 :]
                assign(t + 1, new_left, new_done)

    assign(0, inst.chunks, (0,) * n_tasks)
    orders = [
        p
        for p in itertools.permutations(range(n_ops))
        if all(p.index(q) < p.index(j) for j in range(n_ops) for q in inst.preds[j])
    ]
    best = None
    for done in completions:
        for order in orders:
            free = inst.compute_free
            for j in order:
                free = max([free, *(done[c] for c in inst.needs[j])]) + inst.fwd[j]
            best = free if best is None else min(best, free)
    assert best is not None
    return best


# --- hand-checked instances ------------------------------------------------------------------


def test_single_layer():
    # 2 chunks from slot 0 complete at 2; the 3-long forward runs 2..5.
    inst = chain(release=[0], chunks=[2], fwd=[3], compute_free=0)
    assert optimal_makespan(inst) == 5
    assert priority_makespan(inst, [0]) == 5


def test_compute_bound_chain():
    # Both 1-chunk tasks are done by slot 2, long before compute_free=10: 10 + 2 + 2 = 14.
    inst = chain(release=[0, 0], chunks=[1, 1], fwd=[2, 2], compute_free=10)
    assert optimal_makespan(inst) == 14


def test_preemption_helps_and_reverse_priority_is_worse():
    # Layer 1 (3 chunks) is released at 0, layer 0 (1 chunk) at 1 = compute_free.
    # Forward order (PACE): slot 0 -> c1, slot 1 -> c0 preempts (done 2), slots 2,3 -> c1
    # (done 4); op0 runs 2..3, op1 runs 4..5: makespan 5.
    # Reverse order: c1 in slots 0..2 (done 3), c0 in slot 3 (done 4); op0 4..5, op1 5..6: 6.
    # Optimum 5: the four chunks end no earlier than slot 4; if c1 ends last, op1 ends >= 5;
    # if c0 ends last, op0 ends >= 5 and op1 >= 6.
    inst = chain(release=[1, 0], chunks=[1, 3], fwd=[1, 1], compute_free=1)
    assert optimal_makespan(inst) == 5
    assert consumer_priority(inst) == [0, 1]
    assert priority_makespan(inst, [0, 1]) == 5
    assert priority_makespan(inst, [1, 0]) == 6
    assert brute_force_makespan(inst) == 5


def test_reverse_priority_strictly_worse_two_layers():
    # release=(2, 1), chunks=(1, 3), fwd=(1, 1), compute_free=2.
    # Forward order: slot 1 -> c1; slot 2 -> c0 (done 3); slots 3,4 -> c1 (done 5).
    #   op0 3..4, op1 5..6 -> 6.
    # Reverse: c1 in slots 1..3 (done 4), c0 in slot 4 (done 5); op0 5..6, op1 6..7 -> 7.
    # Optimum 6: all 4 chunks end >= 5 (c1 can't start before 1), so op1 ends >= 6.
    inst = chain(release=[2, 1], chunks=[1, 3], fwd=[1, 1], compute_free=2)
    assert optimal_makespan(inst) == 6
    assert priority_makespan(inst, consumer_priority(inst)) == 6
    assert priority_makespan(inst, [1, 0]) == 7


def test_independent_ops_use_the_disjunction():
    # Two ops with no DAG edge: op0 needs c0 (3 chunks), op1 needs c1 (1 chunk), fwd=(1, 5).
    # The consumer rule ranks c0 first (op0 would start at 0, op1 at 1): c0 done 3, c1 done 4,
    # op0 3..4, op1 4..9 -> 9. Sending c1 first: c1 done 1, c0 done 4, op1 1..6, op0 6..7 -> 7.
    # Optimum 7: the stream has 6 units of work and nothing can start before slot 1.
    inst = Instance(
        release=(0, 0),
        chunks=(3, 1),
        fwd=(1, 5),
        needs=((0,), (1,)),
        preds=((), ()),
        compute_free=0,
    )
    assert optimal_makespan(inst) == 7
    assert consumer_priority(inst) == [0, 1]
    assert priority_makespan(inst, [0, 1]) == 9
    assert priority_makespan(inst, [1, 0]) == 7


def test_consumer_priority_not_optimal_on_a_diamond_dag():
    # Counter-example found by a random DAG survey: rng = np.random.default_rng(10198),
    # n = rng.integers(4, 8) (drew 4), random_instance(rng, n, dag=True).
    # Diamond: op0 -> {op1, op2} -> op3; op j needs task j.
    # release=(8, 7, 6, 2), chunks=(2, 3, 2, 2), fwd=(1, 3, 3, 3), compute_free=8.
    # Compute-only starts 8, 9, 12, 15 -> consumer priority [0, 1, 2, 3]. Channel: c3 slots 2,3
    # (done 4); idle 4,5; c2 slot 6; c1 preempts at 7; c0 slots 8,9 (done 10); c1 10,11
    # (done 12); c2 slot 12 (done 13). Stream: op0 10..11, op1 12..15, op2 15..18, op3 18..21.
    # Priority [0, 2, 1, 3] instead: c2 slots 6,7 (done 8), c0 8,9 (done 10), c1 10..12
    # (done 13). op0 10..11, op2 11..14 (op1 not ready), op1 14..17, op3 17..20 -> 20.
    # Optimum 20: op0 cannot finish before 11 (c0 released at 8, 2 chunks), then 9 units remain.
    inst = Instance(
        release=(8, 7, 6, 2),
        chunks=(2, 3, 2, 2),
        fwd=(1, 3, 3, 3),
        needs=((0,), (1,), (2,), (3,)),
        preds=((), (0,), (0,), (1, 2)),
        compute_free=8,
    )
    rng = np.random.default_rng(10198)
    assert inst == random_instance(rng, int(rng.integers(4, 8)), dag=True)
    assert consumer_priority(inst) == [0, 1, 2, 3]
    assert priority_makespan(inst, [0, 1, 2, 3]) == 21
    assert priority_makespan(inst, [0, 2, 1, 3]) == 20
    assert optimal_makespan(inst) == 20


def test_shared_and_unneeded_tasks_and_zero_duration_ops():
    # op0 (0 long) and op1 both need c0; c1 is needed by nobody but must still be sent.
    inst = Instance(
        release=(0, 0),
        chunks=(2, 1),
        fwd=(0, 2),
        needs=((0,), (0,)),
        preds=((), (0,)),
        compute_free=1,
    )
    # c0 first: done 2; op0 2..2, op1 2..4.
    assert optimal_makespan(inst) == 4 == brute_force_makespan(inst)
    assert consumer_priority(inst) == [0, 1]
    assert priority_makespan(inst, [1, 0]) == 5


# --- random instances ------------------------------------------------------------------------


def test_milp_matches_brute_force_on_tiny_instances():
    rng = np.random.default_rng(7)
    for _ in range(12):
        n = int(rng.integers(2, 4))
        inst = random_instance(rng, n, max_chunks=3, max_fwd=2, max_bwd=1)
        assert optimal_makespan(inst) == brute_force_makespan(inst), inst
    for seed in range(4):
        inst = random_instance(np.random.default_rng(seed), 4, max_chunks=2, max_bwd=1, dag=True)
        assert optimal_makespan(inst) == brute_force_makespan(inst), inst


def test_optimum_never_above_any_priority_schedule():
    rng = np.random.default_rng(123)
    for k in range(16):
        dag = k % 2 == 1
        n = int(rng.integers(4, 6)) if dag else int(rng.integers(2, 6))
        inst = random_instance(rng, n, dag=dag)
        opt = optimal_makespan(inst)
        assert opt >= inst.compute_free + sum(inst.fwd)
        for _ in range(5):
            prio = [int(v) for v in rng.permutation(n)]
            assert opt <= priority_makespan(inst, prio), (inst, prio)


@pytest.mark.parametrize("seed", range(40))
def test_consumer_priority_optimal_on_chains(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, int(rng.integers(2, 6)))
    assert priority_makespan(inst, consumer_priority(inst)) == optimal_makespan(inst), inst


def test_random_instance_shapes():
    inst = random_instance(np.random.default_rng(0), 5)
    assert inst.preds == ((), (0,), (1,), (2,), (3,))
    assert inst.needs == tuple((j,) for j in range(5))
    # Backward of the last layer first: releases strictly decrease with the layer index.
    assert all(a > b for a, b in itertools.pairwise(inst.release))
    assert inst.compute_free == inst.release[0]
    dag = random_instance(np.random.default_rng(1), 6, dag=True)
    assert dag.preds[0] == () and len(dag.preds[-1]) == 2
    assert sum(1 for p in dag.preds if p == (0,)) == 2


# --- validation ------------------------------------------------------------------------------

GOOD = dict(release=(0, 1), chunks=(1, 2), fwd=(1, 1), needs=((0,), (1,)), preds=((), (0,)))


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("chunks", dict(chunks=(1,))),
        ("chunks", dict(chunks=(0, 2))),
        ("release", dict(release=(-1, 1))),
        ("release", dict(release=(0.5, 1))),
        ("fwd", dict(fwd=(1, -1))),
        ("fwd", dict(fwd=(), needs=(), preds=())),
        ("needs", dict(needs=((0,),))),
        ("needs", dict(needs=((0,), (2,)))),
        ("needs", dict(needs=((0, 0), (1,)))),
        ("preds", dict(preds=((), (1,)))),
        ("preds", dict(preds=((1,), ()))),
        ("compute_free", dict(compute_free=-1)),
    ],
)
def test_validation_names_the_field(field, changes):
    kwargs = {**GOOD, "compute_free": 0, **changes}
    with pytest.raises(ValueError, match=field):
        Instance(**kwargs)


def test_priority_length_checked():
    inst = Instance(**GOOD, compute_free=0)
    with pytest.raises(ValueError, match="priority"):
        priority_makespan(inst, [0])


def test_random_instance_rejects_small_dag():
    with pytest.raises(ValueError, match="n_layers"):
        random_instance(np.random.default_rng(0), 3, dag=True)


def test_unproven_optimum_raises():
    inst = random_instance(np.random.default_rng(3), 12, max_chunks=8, dag=True)
    with pytest.raises(RuntimeError, match="optimality"):
        optimal_makespan(inst, time_limit_s=1e-6)
    with pytest.raises(ValueError, match="time_limit_s"):
        optimal_makespan(inst, time_limit_s=0)
