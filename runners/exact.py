"""Exact optimum of one iteration transition's preemptive all-reduce schedule (a PACE check).

PACE (Bao et al., INFOCOM 2020) schedules all-reduce tensors preemptively by priority and claims
the schedule is optimal. This module gives the ground truth on small instances, so the claim and
our reconstruction of the priority rule can be checked empirically.

Model (all times are integers; one time slot ``[t, t+1)`` carries exactly one chunk):

* One network channel carries at most one chunk per slot. Communication task ``c`` (one layer's
  gradient) has ``chunks[c] >= 1`` unit chunks and a release slot ``release[c] >= 0`` (the end of
  its backward op). Its chunks may use any slots ``t >= release[c]``, not necessarily contiguous
  (preemption happens at chunk boundaries). Task ``c`` completes at the end of its last slot.
* One compute stream runs the next iteration's forward ops, op ``j`` lasting ``fwd[j] >= 0``,
  none starting before ``compute_free`` (the end of backward). Op ``j`` needs every task in
  ``needs[j]`` complete and every op in ``preds[j]`` finished (a DAG; indices are a topological
  order, so ``preds[j]`` only holds indices ``< j``); the stream runs one op at a time and does
  not preempt. A layer chain is ``preds[j] = (j-1,)``, ``needs[j] = (j,)``.
* The objective is the makespan: the finish time of the last forward op.

Not modelled: the all-reduce's own latency term, credit/pipelining of several chunks on the wire,
and compute/communication interference; a task needed by no op still has to be sent but never
affects the makespan.

``optimal_makespan`` solves a time-indexed MILP with ``scipy.optimize.milp`` (HiGHS);
``priority_makespan`` gives what a preemptive priority scheduler plus a list-scheduling compute
stream achieves (the reference semantics that the harness's event simulator implements too);
``consumer_priority`` is our reconstruction of PACE's priority rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

__all__ = [
    "Instance",
    "consumer_priority",
    "optimal_makespan",
    "priority_makespan",
    "random_instance",
]


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class Instance:
    """One iteration transition: comm tasks (``release``, ``chunks``) and forward ops (``fwd``,
    ``needs``, ``preds``) on one channel and one compute stream; see the module docstring.

    Validation (``ValueError`` naming the field) requires: tuples of plain integers; ``release``
    and ``chunks`` of equal length; ``fwd``, ``needs`` and ``preds`` of equal length >= 1;
    ``release >= 0``, ``chunks >= 1``, ``fwd >= 0``, ``compute_free >= 0``; ``needs`` entries
    valid task indices; ``preds[j]`` entries op indices ``< j`` (topological order); no
    duplicates inside one ``needs[j]`` or ``preds[j]``.
    """

    release: tuple[int, ...]
    chunks: tuple[int, ...]
    fwd: tuple[int, ...]
    needs: tuple[tuple[int, ...], ...]
    preds: tuple[tuple[int, ...], ...]
    compute_free: int

    def __post_init__(self) -> None:
        for name in ("release", "chunks", "fwd"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(_is_int(v) for v in value):
                raise ValueError(f"{name}: must be a tuple of ints, got {value!r}")
        if len(self.chunks) != len(self.release):
            raise ValueError(
                f"chunks: length {len(self.chunks)} differs from release's {len(self.release)}"
            )
        if any(r < 0 for r in self.release):
            raise ValueError(f"release: every release slot must be >= 0, got {self.release}")
        if any(k < 1 for k in self.chunks):
            raise ValueError(f"chunks: every task needs >= 1 chunk, got {self.chunks}")
        if not self.fwd:
            raise ValueError("fwd: at least one forward op is required")
        if any(d < 0 for d in self.fwd):
            raise ValueError(f"fwd: durations must be >= 0, got {self.fwd}")
        if not _is_int(self.compute_free) or self.compute_free < 0:
            raise ValueError(f"compute_free: must be an int >= 0, got {self.compute_free!r}")
        n_ops, n_tasks = len(self.fwd), len(self.release)
        for name in ("needs", "preds"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or len(value) != n_ops:
                raise ValueError(f"{name}: must be a tuple with one tuple per op ({n_ops})")
            for j, entry in enumerate(value):
                if not isinstance(entry, tuple) or not all(_is_int(v) for v in entry):
                    raise ValueError(f"{name}[{j}]: must be a tuple of ints, got {entry!r}")
                if len(set(entry)) != len(entry):
                    raise ValueError(f"{name}[{j}]: duplicate entries in {entry}")
                limit = n_tasks if name == "needs" else j
                if any(v < 0 or v >= limit for v in entry):
                    what = "task indices" if name == "needs" else f"op indices < {j}"
                    raise ValueError(f"{name}[{j}]: entries must be {what}, got {entry}")

    @property
    def n_tasks(self) -> int:
        return len(self.release)

    @property
    def n_ops(self) -> int:
        return len(self.fwd)


def _ancestors(inst: Instance) -> list[set[int]]:
    anc: list[set[int]] = []
    for j in range(inst.n_ops):
        s: set[int] = set()
        for p in inst.preds[j]:
            s.add(p)
            s |= anc[p]
        anc.append(s)
    return anc


def _channel_completions(inst: Instance, priority: Sequence[int]) -> list[int]:
    """Completion slot of each task under preemptive priority (lower value first, ties by
    index); the channel never idles while a released task is unfinished."""
    remaining = list(inst.chunks)
    done = [0] * inst.n_tasks
    order = sorted(range(inst.n_tasks), key=lambda c: (priority[c], c))
    left = sum(remaining)
    t = 0
    while left:
        ready = [c for c in order if remaining[c] and inst.release[c] <= t]
        if not ready:
            t = min(inst.release[c] for c in range(inst.n_tasks) if remaining[c])
            continue
        c = ready[0]
        remaining[c] -= 1
        left -= 1
        t += 1
        if not remaining[c]:
            done[c] = t
    return done


def _list_schedule(inst: Instance, ready_at: Sequence[int]) -> list[int]:
    """Start times of the ops under list scheduling: whenever the stream is free it starts the
    lowest-index op whose preds are done and whose needed tasks are complete (``ready_at``: the
    completion time of each task); otherwise it waits for the next task completion."""
    n = inst.n_ops
    start: list[int | None] = [None] * n
    need_time = [max((ready_at[c] for c in inst.needs[j]), default=0) for j in range(n)]
    free = inst.compute_free
    for _ in range(n):
        while True:
            # Ops already started are finished by `free`: the stream runs one op at a time.
            candidates = [
                j
                for j in range(n)
                if start[j] is None and all(start[p] is not None for p in inst.preds[j])
            ]
            now = [j for j in candidates if need_time[j] <= free]
            if now:
                j = now[0]
                start[j] = free
                free += inst.fwd[j]
                break
            free = min(need_time[j] for j in candidates)
    return [s for s in start if s is not None]


def priority_makespan(inst: Instance, priority: Sequence[int]) -> int:
    """Makespan of the preemptive priority schedule for ``inst``.

    Channel: in every slot, one chunk of the released, unfinished task with the smallest
    ``priority`` value (ties by task index); it never idles while such a task exists. Compute
    stream: list scheduling, non-preemptive — whenever free it starts the lowest-index op whose
    preds are finished and whose needed tasks are complete, else it waits for the next task
    completion. ``priority`` needs one int per task; smaller is sent first.
    """
    if len(priority) != inst.n_tasks:
        raise ValueError(f"priority: need {inst.n_tasks} values, got {len(priority)}")
    done = _channel_completions(inst, priority)
    start = _list_schedule(inst, done)
    return max(s + d for s, d in zip(start, inst.fwd, strict=True))


def consumer_priority(inst: Instance) -> list[int]:
    """PACE's priority rule as we reconstruct it: rank the tasks by the start time of the
    earliest forward op that needs them in a compute-only list schedule (communication ignored,
    from ``compute_free``), ties by that op's index, then by task index. Tasks needed by no op
    come last. Returns dense ranks ``0..n_tasks-1`` (0 = sent first).

    Assumption: with indices in topological order and one stream, the compute-only list
    schedule runs ops in index order, so start times are prefix sums of ``fwd``.

    On a chain this is optimal: the list-scheduled makespan is ``max(compute_free + sum(fwd),
    max_j C_j + sum(fwd[j:]))``, a maximum lateness with due dates ordered like the layers, which
    preemptive earliest-due-date first minimises (Jackson's rule with preemption). On DAGs it is
    not always optimal; ``tests/unit/test_exact.py`` keeps a diamond counter-example.
    """
    start = _list_schedule(inst, [0] * inst.n_tasks)
    inf = (float("inf"), inst.n_ops)
    key = [inf] * inst.n_tasks
    for j in range(inst.n_ops):
        for c in inst.needs[j]:
            key[c] = min(key[c], (float(start[j]), j))
    order = sorted(range(inst.n_tasks), key=lambda c: (key[c], c))
    rank = [0] * inst.n_tasks
    for r, c in enumerate(order):
        rank[c] = r
    return rank


def optimal_makespan(inst: Instance, time_limit_s: float = 20.0) -> int:
    """Minimum makespan of ``inst`` over all feasible schedules, by a MILP (HiGHS via
    ``scipy.optimize.milp``).

    Formulation: binary ``x[c,t]`` (task ``c`` sends a chunk in slot ``t``, ``t >= release[c]``),
    completion ``C_c >= (t+1) x[c,t]``, op start times ``S_j``, makespan ``M >= S_j + fwd[j]``,
    and for each pair of ops not ordered by the DAG a big-M disjunction binary. Assumptions
    that keep it exact: chunks can always be left-shifted without delaying any completion, so
    slots ``< max(release) + sum(chunks)`` suffice; the priority schedule's makespan is a valid
    upper bound and sizes the big-M. Raises ``RuntimeError`` unless the solver proves
    optimality within ``time_limit_s``.
    """
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s: must be > 0, got {time_limit_s}")
    nt, no = inst.n_tasks, inst.n_ops
    horizon = (max(inst.release) + sum(inst.chunks)) if nt else 0
    ub = priority_makespan(inst, consumer_priority(inst))
    lb = inst.compute_free + sum(inst.fwd)

    col = 0
    xcol: dict[tuple[int, int], int] = {}
    for c in range(nt):
        for t in range(inst.release[c], horizon):
            xcol[c, t] = col
            col += 1
    ccol = list(range(col, col + nt))
    col += nt
    scol = list(range(col, col + no))
    col += no
    mcol = col
    col += 1
    anc = _ancestors(inst)
    pairs = [(i, j) for j in range(no) for i in range(j) if i not in anc[j]]
    ycol = list(range(col, col + len(pairs)))
    col += len(pairs)

    lo = np.zeros(col)
    hi = np.ones(col)
    integrality = np.zeros(col)
    integrality[list(xcol.values())] = 1
    integrality[ycol] = 1
    for c in range(nt):
        lo[ccol[c]] = inst.release[c] + inst.chunks[c]
        hi[ccol[c]] = horizon
    for j in range(no):
        lo[scol[j]] = inst.compute_free
        hi[scol[j]] = ub - inst.fwd[j]
    lo[mcol], hi[mcol] = lb, ub
    integrality[mcol] = 1

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    row_lo: list[float] = []
    row_hi: list[float] = []

    def add(terms: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(row_lo)
        for k, v in terms:
            rows.append(r)
            cols.append(k)
            vals.append(v)
        row_lo.append(low)
        row_hi.append(high)

    for c in range(nt):
        add(
            [(xcol[c, t], 1.0) for t in range(inst.release[c], horizon)],
            inst.chunks[c],
            inst.chunks[c],
        )
        for t in range(inst.release[c], horizon):
            add([(ccol[c], 1.0), (xcol[c, t], -(t + 1.0))], 0.0, np.inf)
    for t in range(horizon):
        slot = [(xcol[c, t], 1.0) for c in range(nt) if (c, t) in xcol]
        if len(slot) > 1:
            add(slot, -np.inf, 1.0)
    for j in range(no):
        for c in inst.needs[j]:
            add([(scol[j], 1.0), (ccol[c], -1.0)], 0.0, np.inf)
        for p in inst.preds[j]:
            add([(scol[j], 1.0), (scol[p], -1.0)], inst.fwd[p], np.inf)
        add([(mcol, 1.0), (scol[j], -1.0)], inst.fwd[j], np.inf)
    big = float(ub)
    for (i, j), y in zip(pairs, ycol, strict=True):
        # y = 1: i before j; y = 0: j before i.
        add([(scol[j], 1.0), (scol[i], -1.0), (y, -big)], inst.fwd[i] - big, np.inf)
        add([(scol[i], 1.0), (scol[j], -1.0), (y, big)], inst.fwd[j], np.inf)

    cost = np.zeros(col)
    cost[mcol] = 1.0
    a = coo_matrix((vals, (rows, cols)), shape=(len(row_lo), col)).tocsr()
    res = milp(
        cost,
        integrality=integrality,
        bounds=Bounds(lo, hi),
        constraints=LinearConstraint(a, row_lo, row_hi),
        options={"time_limit": time_limit_s, "mip_rel_gap": 0.0},
    )
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"MILP not solved to proven optimality: {res.message}")
    value = res.x[mcol]
    best = round(value)
    if abs(value - best) > 1e-6:
        raise RuntimeError(f"MILP makespan {value} is not integral")
    return int(best)


def random_instance(
    rng: np.random.Generator,
    n_layers: int,
    *,
    max_chunks: int = 4,
    max_fwd: int = 3,
    max_bwd: int = 4,
    dag: bool = False,
) -> Instance:
    """A small random instance with one comm task per layer (op ``j`` needs task ``j``).

    Chain (``dag=False``): ``preds[j] = (j-1,)``. DAG (``dag=True``, ``n_layers >= 4``): op 0 is
    a stem, ops ``1..a`` and ``a+1..n-2`` form two parallel chains hanging off the stem
    (``a >= 1`` and the second branch non-empty, split drawn at random) and op ``n-1`` joins
    them. Backward runs in reverse index order starting at 0 (layer ``n-1`` first), each op
    lasting ``1..max_bwd``; ``release[i]`` is the end of layer ``i``'s backward and
    ``compute_free`` the end of the whole backward. Chunks are in ``1..max_chunks``, forward
    durations in ``1..max_fwd``.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers: must be >= 1, got {n_layers}")
    if dag and n_layers < 4:
        raise ValueError(f"n_layers: a DAG instance needs >= 4 layers, got {n_layers}")
    for name, v in (("max_chunks", max_chunks), ("max_fwd", max_fwd), ("max_bwd", max_bwd)):
        if v < 1:
            raise ValueError(f"{name}: must be >= 1, got {v}")
    n = n_layers
    bwd = rng.integers(1, max_bwd + 1, size=n)
    chunks = rng.integers(1, max_chunks + 1, size=n)
    fwd = rng.integers(1, max_fwd + 1, size=n)
    release = [0] * n
    t = 0
    for i in reversed(range(n)):
        t += int(bwd[i])
        release[i] = t
    if dag:
        a = int(rng.integers(1, n - 2))  # branch A = ops 1..a, branch B = ops a+1..n-2
        preds: list[tuple[int, ...]] = [()]
        for j in range(1, n - 1):
            preds.append((0,) if j in (1, a + 1) else (j - 1,))
        preds.append((a, n - 2))
    else:
        preds = [()] + [(j - 1,) for j in range(1, n)]
    return Instance(
        release=tuple(release),
        chunks=tuple(int(k) for k in chunks),
        fwd=tuple(int(d) for d in fwd),
        needs=tuple((j,) for j in range(n)),
        preds=tuple(preds),
        compute_free=t,
    )
