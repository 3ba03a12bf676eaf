"""runners.policies.tictac: TIC and TAC priorities on hand-checked DAGs, against a naive set-based
transcription of the definitions (comm.md §3.2) on random DAGs, speed, and input validation."""

from __future__ import annotations

import math
import random
import time
from functools import cmp_to_key

import pytest

from runners.policies.tictac import tac_priorities, tic_priorities


def chain(n: int) -> list[tuple[int, ...]]:
    return [()] + [(i - 1,) for i in range(1, n)]


# Diamond: 0 -> {1, 2} -> 3.
DIAMOND = [(), (0,), (0,), (1, 2)]

# Inception-like block: stem 0; branch C = 1 -> 2 -> 3 (long, first in index order);
# branch B = 4 -> 5; branch A = 6 (short, last in index order); concat 7 joins 3, 5 and 6.
INCEPTION = [(), (0,), (1,), (2,), (0,), (4,), (0,), (3, 5, 6)]


def random_dag(n: int, seed: int, max_deps: int = 3, window: int = 10) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    deps: list[tuple[int, ...]] = [()]
    for i in range(1, n):
        pool = range(max(0, i - window), i)
        k = min(len(pool), rng.randint(0, max_deps))
        deps.append(tuple(sorted(rng.sample(pool, k))))
    return deps


# ------------------------------------------------------------ naive reference (sets, no reuse)
def naive_d(deps):
    d: list[set[int]] = []
    for i, ds in enumerate(deps):
        s = {i}
        for j in ds:
            s |= d[j]
        d.append(s)
    return d


def naive_tic(deps):
    d = naive_d(deps)
    n = len(deps)
    m_plus = [min((len(s) for s in d if len(s) > 1 and r in s), default=math.inf) for r in range(n)]
    return [sum(1 for other in m_plus if other < m_plus[r]) for r in range(n)]


def naive_tac(deps, compute, transfer):
    d = naive_d(deps)
    n = len(deps)
    left = set(range(n))
    prio = [None] * n
    for step in range(n):
        p = {r: 0 for r in left}
        m_plus = {r: math.inf for r in left}
        for o, s in enumerate(d):
            rest = s & left
            if len(rest) == 1:
                p[next(iter(rest))] += compute[o]
            elif len(rest) > 1:
                cost = sum(transfer[r] for r in rest)
                for r in rest:
                    m_plus[r] = min(m_plus[r], cost)

        def cmp(a, b, p=p, m_plus=m_plus):
            if min(p[b], transfer[a]) < min(p[a], transfer[b]):
                return -1
            if min(p[a], transfer[b]) < min(p[b], transfer[a]):
                return 1
            if m_plus[a] != m_plus[b]:
                return -1 if m_plus[a] < m_plus[b] else 1
            return a - b

        head = sorted(sorted(left), key=cmp_to_key(cmp))[0]
        prio[head] = step
        left.remove(head)
    return prio


# ----------------------------------------------------------------------------------- TIC
def test_tic_chain_is_layer_order_with_first_two_tied():
    # D(op i) = {r0..ri}. Op 0 has |D| = 1, so it never counts; M+(r0) = |D(op1)| = 2,
    # M+(r1) = 2, M+(ri) = i + 1. Ranks with ties sharing the smallest: [0, 0, 2, 3, ...].
    assert tic_priorities(chain(6)) == [0, 0, 2, 3, 4, 5]
    assert tic_priorities(chain(2)) == [0, 0]


def test_tic_single_op_and_empty():
    assert tic_priorities([()]) == [0]  # M+ = inf, alone
    assert tic_priorities([]) == []
    assert tic_priorities([(), ()]) == [0, 0]  # two independent ops: both M+ = inf


def test_tic_diamond():
    # D: op0 {0}, op1 {0,1}, op2 {0,2}, op3 {0,1,2,3}.
    # M+(r0) = min(2, 2, 4) = 2; M+(r1) = min(|D1|=2, |D3|=4) = 2; M+(r2) = 2; M+(r3) = 4.
    # Sorted: r0, r1, r2 tied at rank 0; r3 at rank 3.
    assert tic_priorities(DIAMOND) == [0, 0, 0, 3]


def test_tic_inception_block_puts_short_branch_first():
    # D sizes: op0 1, op1 2, op2 3, op3 4, op4 2, op5 3, op6 2, op7 8.
    # M+: r0 = 2 (op1), r1 = 2 (op1), r2 = 3 (op2), r3 = 4 (op3), r4 = 2 (op4), r5 = 3 (op5),
    #     r6 = 2 (op6), r7 = 8 (op7).
    # Groups: {r0, r1, r4, r6} -> 0; {r2, r5} -> 4; {r3} -> 6; {r7} -> 7.
    # The one-op branch (r6, last in index order) is sent with the first group, ahead of r2/r3.
    assert tic_priorities(INCEPTION) == [0, 0, 4, 6, 0, 4, 0, 7]


@pytest.mark.parametrize("seed", range(8))
def test_tic_matches_naive_definition(seed):
    deps = random_dag(40, seed)
    assert tic_priorities(deps) == naive_tic(deps)


# ----------------------------------------------------------------------------------- TAC
def test_tac_chain_equal_costs_is_layer_order():
    # Each round only the lowest outstanding layer has P > 0 (its op needs nothing else), all
    # other P = 0, so min(P_b, M_a) = 0 < min(P_a, M_b) puts it first.
    for n in (1, 2, 7):
        assert tac_priorities(chain(n), [1.0] * n, [1.0] * n) == list(range(n))
    assert tac_priorities(chain(5), [0.0] * 5, [0.3] * 5) == list(range(5))  # via M+ only


def test_tac_prefers_recv_that_unblocks_more_compute():
    # Two independent ops, equal transfer M = 1; P(r0) = 0.5 < M, P(r1) = 5 > M.
    # a=1, b=0: min(P0=0.5, M1=1) = 0.5 < min(P1=5, M0=1) = 1  ->  r1 first (Johnson's rule).
    assert tac_priorities([(), ()], [0.5, 5.0], [1.0, 1.0]) == [1, 0]
    assert tac_priorities([(), ()], [5.0, 0.5], [1.0, 1.0]) == [0, 1]


def test_tac_diamond():
    # compute = [1, 1, 4, 1], transfer M = [1, 2, 1, 1].
    # Round 1, R' = all: P = [1, 0, 0, 0] (only op0 has a single outstanding recv).
    #   M+: op1 {0,1} 3, op2 {0,2} 2, op3 {0,1,2,3} 5 -> M+ = [2, 3, 2, 5].
    #   r0 vs any b: min(P_b=0, M0) = 0 < min(P0=1, M_b) = 1 -> r0 first.      prio[0] = 0
    # Round 2, R' = {1,2,3}: P1 = 1 (op1), P2 = 4 (op2), P3 = 0; op3 {1,2,3} cost 4.
    #   r2 vs r1: min(P1=1, M2=1) = 1 < min(P2=4, M1=2) = 2 -> r2 first; r2 vs r3: 0 < 1.
    #                                                                           prio[2] = 1
    # Round 3, R' = {1,3}: P1 = 1, P3 = 0; r1 vs r3: min(0, 2) = 0 < min(1, 1) = 1. prio[1] = 2
    assert tac_priorities(DIAMOND, [1, 1, 4, 1], [1, 2, 1, 1]) == [0, 2, 1, 3]
    # Unit costs: every tie falls back to M+ then index -> layer order.
    assert tac_priorities(DIAMOND, [1] * 4, [1] * 4) == [0, 1, 2, 3]


def test_tac_inception_block():
    # Unit costs. Round 1: only P0 > 0 -> r0. Round 2 (R' = 1..7): P1 = P4 = P6 = 1, rest 0;
    # Johnson ties among the P=1 recvs (min(1,1) both ways); M+: r1 2 (op2), r4 2 (op5),
    # r6 7 (op7) -> r1. Round 3: P2 = P4 = P6 = 1; M+ r2 2, r4 2, r6 6 -> r2 (index).
    # Round 4 (R' = 3..7): P3 = P4 = P6 = 1; M+ r3 5 (op7), r4 2 (op5), r6 5 -> r4.
    # Round 5: P3 = P5 = P6 = 1, all M+ 4 -> r3; then r5, r6, r7.
    assert tac_priorities(INCEPTION, [1] * 8, [1] * 8) == [0, 1, 2, 4, 3, 5, 6, 7]
    # Heavy one-op branch: compute[6] = 4, all transfers M = 2.
    # Round 1 -> r0. Round 2: P1 = P4 = 1, P6 = 4; r6 vs r1: min(P1=1, M=2) = 1 <
    # min(P6=4, M=2) = 2 -> r6 first (prio 1). Round 3: P1 = P4 = 1; M+ r1 4 (op2), r4 4 (op5)
    # -> r1. Round 4: P2 = P4 = 1, M+ 4 and 4 -> r2. Round 5: P3 = P4 = 1; M+ r3 8 (op7),
    # r4 4 (op5) -> r4. Then r3, r5, r7.
    compute = [1, 1, 1, 1, 1, 1, 4, 1]
    assert tac_priorities(INCEPTION, compute, [2] * 8) == [0, 2, 3, 5, 4, 6, 1, 7]


def test_tac_is_a_permutation_and_deterministic():
    deps = random_dag(60, 3)
    rng = random.Random(9)
    compute = [rng.random() for _ in deps]
    transfer = [rng.random() for _ in deps]
    first = tac_priorities(deps, compute, transfer)
    assert sorted(first) == list(range(60))
    assert tac_priorities(deps, compute, transfer) == first


@pytest.mark.parametrize("seed", range(8))
def test_tac_matches_naive_definition(seed):
    # Small integer costs: exact in floats, many ties, so the tie-breaking paths are exercised.
    deps = random_dag(30, seed)
    rng = random.Random(100 + seed)
    compute = [float(rng.randint(0, 4)) for _ in deps]
    transfer = [float(rng.randint(1, 4)) for _ in deps]
    assert tac_priorities(deps, compute, transfer) == naive_tac(deps, compute, transfer)


def test_tac_sums_are_exact_not_float_accumulated():
    # Join op2 needs {r0, r1, r2} with transfers 1e16 + 2 + 0; join op6 needs {r3..r6} with
    # 1e16 + 1 + 1 + 0. Both sums are exactly 1e16 + 2, but left-to-right float addition gives
    # (1e16 + 1) + 1 == 1e16 for the second. Compute is 0, so Johnson's rule ties everywhere
    # and M+ decides: exact -> all tie in round 1 -> r0 by index (float sums would pick r3).
    # Round 2: op2 has {r1, r2} cost 2 -> r1. Round 3: op2 only {r2}, M+(r2) = inf; r3..r6 tie
    # at 1e16 + 2 -> r3; then op6's remaining sums 2 -> r4, 1 -> r5; finally r2 and r6 (inf).
    assert (1e16 + 1.0) + 1.0 == 1e16
    deps = [(), (), (0, 1), (), (), (), (3, 4, 5)]
    transfer = [1e16, 2.0, 0.0, 1e16, 1.0, 1.0, 0.0]
    assert tac_priorities(deps, [0.0] * 7, transfer) == [0, 1, 5, 2, 3, 4, 6]


def test_speed_300_ops():
    deps = random_dag(300, 42, max_deps=3, window=20)
    rng = random.Random(1)
    compute = [rng.random() for _ in deps]
    transfer = [rng.random() for _ in deps]
    start = time.perf_counter()
    tic = tic_priorities(deps)
    tac = tac_priorities(deps, compute, transfer)
    elapsed = time.perf_counter() - start
    assert len(tic) == len(tac) == 300
    assert elapsed < 2.0  # ~0.15 s measured on the project machine


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "deps, op",
    [([(), (1,)], "op 1"), ([(), (0,), (5,)], "op 2"), ([(), (-1,)], "op 1")],
)
def test_bad_dependency_names_the_op(deps, op):
    with pytest.raises(ValueError, match=op):
        tic_priorities(deps)
    with pytest.raises(ValueError, match=op):
        tac_priorities(deps, [1.0] * len(deps), [1.0] * len(deps))


def test_length_mismatch():
    with pytest.raises(ValueError, match="compute_s"):
        tac_priorities(chain(3), [1.0, 1.0], [1.0] * 3)
    with pytest.raises(ValueError, match="transfer_s"):
        tac_priorities(chain(3), [1.0] * 3, [1.0] * 4)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_bad_cost(bad):
    with pytest.raises(ValueError, match=r"transfer_s\[1\]"):
        tac_priorities(chain(3), [1.0] * 3, [1.0, bad, 1.0])
