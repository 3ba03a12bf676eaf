"""TicTac transfer orders: TIC and TAC priorities for parameter-server pulls.

Source: Hashemi, Abdu Jyothi, Campbell, "TicTac: Accelerating Distributed Deep Learning with
Communication Scheduling", MLSys 2019; the algorithm follows the reference implementation
gh:xldrx/tictac (``tic.py``, ``tac.py``, ``common.py``) as paraphrased in
``/work/shared/research/comm.md`` section 3.2. Nothing here is copied code.

Our model (an assumption of this harness, not TicTac's TensorFlow graph): a DNN is a DAG of L
forward ops in topological index order ``0..L-1``; ``deps[i]`` lists the ops whose outputs op
``i`` consumes (all ``< i``). Op ``i`` owns one parameter tensor, i.e. one *recv* ``r_i`` (the
PS->worker transfer of layer ``i``'s parameters), and op ``i`` needs ``r_i`` plus its deps'
outputs. Hence ``D(o)``, the set of recvs op ``o`` transitively depends on, is
``{r_j : j == o or j is an ancestor of o}``. Sets are Python int bitsets (bit ``j`` = ``r_j``).

Definitions, over the set ``R'`` of outstanding recvs:

- ``M(r)``: cost of transferring ``r``;
- ``P(r)``: total compute of the ops ``o`` with ``D(o) & R' == {r}`` (compute that can run as
  soon as ``r`` alone arrives);
- ``M+(r)``: the least ``sum(M(r') for r' in D(o) & R')`` over ops ``o`` with
  ``|D(o) & R'| > 1`` and ``r in D(o)``; infinity if there is none.

TIC uses ``M = 1`` and zero compute and ranks recvs by ``M+`` once. TAC re-evaluates all three
quantities after each pick and takes the head of a sort by Johnson's comparator.

Observations (ours): for a pure chain ``D(i) = {r_0..r_i}``, so TIC degenerates to layer order
with layers 0 and 1 tied (``[0, 0, 2, 3, ...]``), and TAC with uniform costs gives layer order
too; the two differ from layer order only on branchy DAGs (Inception/ResNet blocks, multi-input
ops). The TAC comparator "a before b iff ``min(P_b, M_a) < min(P_a, M_b)``" is Johnson's rule
for a 2-stage flow shop (stage 1 = transfer, stage 2 = dependent compute). As a pairwise
relation it is not transitive when it declares ties, so the head of the sort depends on the
sort algorithm and the input order; like the reference we feed Python's ``sorted`` (via
``functools.cmp_to_key``) the outstanding recvs in ascending index order.

Arithmetic: costs are converted to exact integers (every finite float is a dyadic rational, so
all of them scale to integers by one common power of two) so that sums, ties and comparisons are
exact and independent of summation order; the output only depends on the real-valued inputs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Sequence
from functools import cmp_to_key

__all__ = ["tac_priorities", "tic_priorities"]


def _bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of ``mask``, ascending."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _closures(deps: Sequence[Sequence[int]]) -> list[int]:
    """Validate ``deps`` and return ``D(o)`` as a bitset for every op ``o``."""
    closure: list[int] = []
    for i, op_deps in enumerate(deps):
        mask = 1 << i
        for dep in op_deps:
            try:
                j = operator.index(dep)
            except TypeError:
                j = None
            if j is None or isinstance(dep, bool):
                raise ValueError(f"deps: op {i} has a non-integer dependency {dep!r}")
            if not 0 <= j < i:
                raise ValueError(
                    f"deps: op {i} depends on op {j}; dependencies must be earlier ops "
                    f"(0 <= dep < {i}, topological index order)"
                )
            mask |= closure[j]
        closure.append(mask)
    return closure


def _exact_costs(n: int, **named: Sequence[float]) -> list[list[int]]:
    """Validate cost lists (length ``n``, finite, ``>= 0``) and return them as integers on one
    common scale: every finite float is ``num / 2**k``, so multiplying by the largest ``2**k``
    is exact and makes sums and comparisons exact and independent of summation order."""
    ratios: list[list[tuple[int, int]]] = []
    for name, values in named.items():
        if len(values) != n:
            raise ValueError(f"{name}: expected {n} values (one per op), got {len(values)}")
        row = []
        for i, v in enumerate(values):
            x = float(v)
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"{name}[{i}] must be finite and >= 0, got {v!r}")
            row.append(x.as_integer_ratio())
        ratios.append(row)
    den = max((d for row in ratios for _, d in row), default=1)
    return [[num * (den // d) for num, d in row] for row in ratios]


def _min_plus(
    masks: Sequence[int], counts: Sequence[int], costs: Sequence[int], outstanding: int
) -> dict[int, int]:
    """``M+(r)`` for every outstanding ``r`` that has a multi-dependency op (others: absent).

    Ops are visited by ascending cost; each recv takes the cost of the first op covering it.
    """
    order = sorted((o for o, c in enumerate(counts) if c > 1), key=costs.__getitem__)
    m_plus: dict[int, int] = {}
    covered = 0
    for o in order:
        new = masks[o] & ~covered
        if new:
            for r in _bits(new):
                m_plus[r] = costs[o]
            covered |= new
            if covered == outstanding:
                break
    return m_plus


def tic_priorities(deps: Sequence[Sequence[int]]) -> list[int]:
    """TIC (timing-independent) priority of every layer's recv; lower = sent earlier.

    ``M(r) = 1`` for every recv and compute costs are 0, so ``M+(r)`` is the size of the
    smallest ``D(o)`` with more than one recv that contains ``r`` (infinity if none). Recvs are
    ranked by ascending ``M+``; tied recvs share the smallest rank of their group (competition
    ranking), so the result is the number of recvs with a strictly smaller ``M+``.

    Example: a chain gives ``[0, 0, 2, 3, ..., L-1]`` (``M+(r_0) = M+(r_1) = 2``,
    ``M+(r_i) = i + 1``). Raises ``ValueError`` on a dependency that is not an earlier op.
    """
    closure = _closures(deps)
    n = len(closure)
    counts = [mask.bit_count() for mask in closure]
    everything = (1 << n) - 1
    m_plus = _min_plus(closure, counts, counts, everything)
    keys = [m_plus.get(r, math.inf) for r in range(n)]
    order = sorted(range(n), key=keys.__getitem__)
    priority = [0] * n
    for rank, r in enumerate(order):
        if rank and keys[r] == keys[order[rank - 1]]:
            priority[r] = priority[order[rank - 1]]
        else:
            priority[r] = rank
    return priority


def tac_priorities(
    deps: Sequence[Sequence[int]],
    compute_s: Sequence[float],
    transfer_s: Sequence[float],
) -> list[int]:
    """TAC (timing-aware) priority of every layer's recv: a permutation of ``0..L-1``.

    ``compute_s[i]`` is op ``i``'s (profiled) compute time and ``transfer_s[i]`` the transfer
    time of ``r_i``. While recvs remain, ``M``, ``P`` and ``M+`` are recomputed over the
    outstanding set; the recvs (in index order) are sorted with the comparator "a before b iff
    ``min(P_b, M_a) < min(P_a, M_b)``; if neither, smaller ``M+`` first; then smaller index",
    and the head gets the next priority number and leaves the outstanding set.

    Cost: O(L) rounds, each O(L log L) bitset operations plus one comparison sort.
    Raises ``ValueError`` on a bad dependency, a length mismatch or a negative/non-finite cost.
    """
    closure = _closures(deps)
    n = len(closure)
    comp, xfer = _exact_costs(n, compute_s=compute_s, transfer_s=transfer_s)

    # dependents[r] = ops o with r in D(o); maintained per-op count/cost over the outstanding set
    dependents: list[list[int]] = [[] for _ in range(n)]
    for o, mask in enumerate(closure):
        for r in _bits(mask):
            dependents[r].append(o)
    counts = [mask.bit_count() for mask in closure]
    costs = [sum(xfer[r] for r in _bits(mask)) for mask in closure]

    outstanding = (1 << n) - 1
    priority = [0] * n
    for step in range(n):
        masks = [mask & outstanding for mask in closure]
        p = [0] * n
        for o, c in enumerate(counts):
            if c == 1:
                p[masks[o].bit_length() - 1] += comp[o]
        m_plus = _min_plus(masks, counts, costs, outstanding)

        def before(a: int, b: int, p: list[int] = p, m_plus: dict[int, int] = m_plus) -> int:
            ab = min(p[b], xfer[a])
            ba = min(p[a], xfer[b])
            if ab < ba:
                return -1
            if ba < ab:
                return 1
            ma = m_plus.get(a, math.inf)
            mb = m_plus.get(b, math.inf)
            if ma != mb:
                return -1 if ma < mb else 1
            return a - b

        head = sorted(_bits(outstanding), key=cmp_to_key(before))[0]
        priority[head] = step
        outstanding &= ~(1 << head)
        for o in dependents[head]:
            counts[o] -= 1
            costs[o] -= xfer[head]
    return priority
