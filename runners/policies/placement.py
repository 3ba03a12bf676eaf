"""Key -> server placement for the parameter-server arena: framework defaults and PSLD moves.

Sources (paraphrased in ``/work/shared/research/comm.md``; nothing here is copied code):

- MXNet KVStore default (§6.6, MXNet 1.x ``src/kvstore/kvstore_dist.h``): an array with fewer
  elements than ``MXNET_KVSTORE_BIGARRAY_BOUND`` (default 1,000,000) goes whole to server
  ``(key * 9973) % servers``; a bigger one is split into one part per server, part ``i`` on
  server ``i``, sized by rounded cumulative shares.
- BytePS default (§6.7): tensors are cut into partitions of ``BYTEPS_PARTITION_BYTES`` (default
  4,096,000); every partition has its own key and goes to ``(key * 9973) % servers``. We number
  partition keys with one running counter over all partitions in key order, as early BytePS did
  (``next_key_++`` per partition in ``byteps/common/global.cc``). Later BytePS releases encode
  keys as ``(tensor_id << 16) + partition`` and default to a djb2 string hash
  (``BYTEPS_KEY_HASH_FN``), and round the partition size up to a multiple of
  ``local_size * page_size``; pass the effective ``partition_bytes`` if you model those.
- PSLD mechanism (§5.2): scale-out/scale-in reassignment as in the MXNet fork of a PSLD
  co-author (gh:pengyanghua/mxnet ``kvstore_dist_scheduler.h``), on whole keys; and the exploit
  step of our PSLD reconstruction (§5.3, [R]: not from the paper).

Conventions: ``sizes[key]`` is a tensor size in bytes (fp32, so elements = ``bytes // 4``);
servers are ``0..servers-1``. A *parts* assignment gives, per key, a list of ``(server, bytes)``
pieces summing to the key's size; a *whole* assignment gives one server id per key. All tie-breaks
are deterministic (lowest index), and balance arithmetic is done in exact integers.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "HASH_MULTIPLIER",
    "best_fit_move",
    "byteps_default",
    "mxnet_default",
    "random_assignment",
    "round_robin",
    "scale_in",
    "scale_out",
    "server_loads",
    "whole_to_parts",
]

HASH_MULTIPLIER = 9973  # MXNet and (early/naive) BytePS: server = (key * 9973) % servers

Parts = list[list[tuple[int, int]]]


# ---------------------------------------------------------------------------------- validation
def _check_servers(servers: int, name: str = "servers", minimum: int = 1) -> None:
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {servers!r}")


def _check_sizes(sizes: Sequence[int]) -> list[int]:
    out = []
    for i, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise ValueError(f"sizes[{i}] must be a non-negative integer (bytes), got {size!r}")
        out.append(int(size))
    return out


def _check_whole(assignment_whole: Sequence[int], n_keys: int, servers: int) -> list[int]:
    if len(assignment_whole) != n_keys:
        raise ValueError(
            f"assignment_whole: expected {n_keys} entries (one per key in sizes), "
            f"got {len(assignment_whole)}"
        )
    out = []
    for key, server in enumerate(assignment_whole):
        if (
            isinstance(server, bool)
            or not isinstance(server, int | np.integer)
            or not 0 <= server < servers
        ):
            raise ValueError(
                f"assignment_whole[{key}] must be a server id in 0..{servers - 1}, got {server!r}"
            )
        out.append(int(server))
    return out


def _round_half_away(x: float) -> int:
    """C ``round()`` for ``x >= 0`` (halves away from zero; Python's ``round`` is banker's)."""
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


# ---------------------------------------------------------------------------- default rules
def mxnet_default(
    sizes: Sequence[int], servers: int, bigarray_bound_elems: int = 1_000_000
) -> Parts:
    """MXNet KVStore placement (comm.md §6.6).

    Key ``k`` with ``sizes[k] // 4 < bigarray_bound_elems`` elements goes whole to server
    ``(k * 9973) % servers``. Otherwise it is split into exactly one part per server (part ``i``
    on server ``i``) of ``round(E / servers * (i + 1)) - round(E / servers * i)`` elements, with
    ``E`` elements and C rounding, as MXNet does; parts are reported in bytes (elements * 4),
    and the ``sizes[k] % 4`` bytes that do not form a whole fp32 element go to the last part so
    that parts sum exactly to the size. A part may be 0 bytes only if the bound is below
    ``servers`` elements.
    """
    _check_servers(servers)
    _check_servers(bigarray_bound_elems, "bigarray_bound_elems")
    parts: Parts = []
    for key, size in enumerate(_check_sizes(sizes)):
        elems = size // 4
        if elems < bigarray_bound_elems:
            parts.append([((key * HASH_MULTIPLIER) % servers, size)])
            continue
        bounds = [_round_half_away(elems / servers * i) for i in range(servers + 1)]
        pieces = [(i, (bounds[i + 1] - bounds[i]) * 4) for i in range(servers)]
        last, last_bytes = pieces[-1]
        pieces[-1] = (last, last_bytes + size - 4 * bounds[-1])
        parts.append(pieces)
    return parts


def byteps_default(sizes: Sequence[int], servers: int, partition_bytes: int = 4_096_000) -> Parts:
    """BytePS placement (comm.md §6.7), parts per original key.

    Each tensor is cut into ``ceil(size / partition_bytes)`` partitions (all full except the
    last); partition keys are a running counter over all partitions in key order, and partition
    ``p`` goes to server ``(p * 9973) % servers``. A 0-byte tensor has no partitions (empty
    list; BytePS itself refuses empty tensors) and consumes no partition key. See the module
    docstring for how later BytePS versions differ.
    """
    _check_servers(servers)
    _check_servers(partition_bytes, "partition_bytes")
    parts: Parts = []
    next_key = 0
    for size in _check_sizes(sizes):
        pieces = []
        done = 0
        while done < size:
            piece = min(partition_bytes, size - done)
            pieces.append(((next_key * HASH_MULTIPLIER) % servers, piece))
            next_key += 1
            done += piece
        parts.append(pieces)
    return parts


def round_robin(sizes: Sequence[int], servers: int) -> list[int]:
    """Whole keys, key ``k`` on server ``k % servers`` (baseline of the PSLD co-author's fork)."""
    _check_servers(servers)
    return [key % servers for key in range(len(_check_sizes(sizes)))]


def random_assignment(sizes: Sequence[int], servers: int, rng: np.random.Generator) -> list[int]:
    """Whole keys, each on a server drawn uniformly at random from ``rng`` (fork baseline)."""
    _check_servers(servers)
    n = len(_check_sizes(sizes))
    return [int(s) for s in rng.integers(0, servers, size=n)]


def whole_to_parts(assignment_whole: Sequence[int], sizes: Sequence[int]) -> Parts:
    """A whole-key assignment as parts: one ``(server, size)`` piece per key."""
    checked = _check_sizes(sizes)
    if len(assignment_whole) != len(checked):
        raise ValueError(
            f"assignment_whole: expected {len(checked)} entries (one per key in sizes), "
            f"got {len(assignment_whole)}"
        )
    return [[(int(server), size)] for server, size in zip(assignment_whole, checked, strict=True)]


def server_loads(assignment: Sequence[Sequence[tuple[int, int]]], servers: int) -> list[int]:
    """Bytes held by each server under a parts assignment."""
    _check_servers(servers)
    loads = [0] * servers
    for key, pieces in enumerate(assignment):
        for server, nbytes in pieces:
            if not 0 <= server < servers:
                raise ValueError(f"assignment[{key}]: server {server} not in 0..{servers - 1}")
            if nbytes < 0:
                raise ValueError(f"assignment[{key}] has a negative piece ({nbytes} bytes)")
            loads[server] += nbytes
    return loads


# ------------------------------------------------------------------------------ PSLD moves
def scale_out(assignment_whole: Sequence[int], sizes: Sequence[int], servers: int) -> list[int]:
    """Add server ``servers`` and move keys onto it (fork's scale-out, comm.md §5.2).

    ``avg = total / (servers + 1)``. While the new server holds less than ``avg``: take the most
    loaded old server (max-heap by bytes, ties to the lower id); if it is not above ``avg``,
    stop; among its keys whose move reduces the imbalance between it and the new server
    (``0 < size`` and ``new_load + size < its_load``), move the one whose size best fits its
    overflow ``load - avg`` (min ``|overflow - size|``, ties to the lower key). A server with no
    such key is dropped from the heap: the new server only grows, so it never gets one later.
    (Our reading: the fork's loop is only described as "until the new server holds >= average";
    dropping stuck servers and the imbalance test are our termination rules.)

    Returns the new whole-key assignment over ``servers + 1`` servers; keys move only to the
    new server.
    """
    _check_servers(servers)
    checked = _check_sizes(sizes)
    assignment = _check_whole(assignment_whole, len(checked), servers)
    k = servers + 1
    total = sum(checked)
    new = servers
    load = [0] * k
    keys_on: list[list[int]] = [[] for _ in range(k)]
    for key, server in enumerate(assignment):
        load[server] += checked[key]
        keys_on[server].append(key)
    heap = [(-load[s], s) for s in range(servers)]
    heapq.heapify(heap)
    # Scaled by k to stay in integers: k*load - total = k * (load - avg).
    while heap and k * load[new] < total:
        _, s = heapq.heappop(heap)
        overflow = k * load[s] - total
        if overflow <= 0:
            break
        candidates = [
            key for key in keys_on[s] if checked[key] > 0 and load[new] + checked[key] < load[s]
        ]
        if not candidates:
            continue
        best = min(candidates, key=lambda key: (abs(overflow - k * checked[key]), key))
        keys_on[s].remove(best)
        load[s] -= checked[best]
        load[new] += checked[best]
        assignment[best] = new
        heapq.heappush(heap, (-load[s], s))
    return assignment


def scale_in(
    assignment_whole: Sequence[int], sizes: Sequence[int], servers: int, remove: int
) -> list[int]:
    """Remove server ``remove`` and spread its keys over the others (fork's scale-in, §5.2).

    ``avg = total / (servers - 1)``. While the removed server still holds keys: take the least
    loaded remaining server (min-heap by bytes, ties to the lower id) and give it the key whose
    size best fits its deficit ``avg - load`` (min ``|deficit - size|``; ties to the larger key,
    then the lower key index). Other keys do not move.

    Renumbering: the result uses ids ``0..servers-2``; servers below ``remove`` keep their id and
    every server above it moves down by one (old ``s`` -> ``s - 1`` for ``s > remove``).
    """
    _check_servers(servers, minimum=2)
    if isinstance(remove, bool) or not isinstance(remove, int) or not 0 <= remove < servers:
        raise ValueError(f"remove must be a server id in 0..{servers - 1}, got {remove!r}")
    checked = _check_sizes(sizes)
    assignment = _check_whole(assignment_whole, len(checked), servers)
    r = servers - 1
    total = sum(checked)
    load = [0] * servers
    for key, server in enumerate(assignment):
        load[server] += checked[key]
    moving = [key for key, server in enumerate(assignment) if server == remove]
    heap = [(load[s], s) for s in range(servers) if s != remove]
    heapq.heapify(heap)
    while moving:
        _, t = heapq.heappop(heap)
        deficit = total - r * load[t]  # r * (avg - load), in integers
        best = min(moving, key=lambda key: (abs(deficit - r * checked[key]), -checked[key], key))
        moving.remove(best)
        assignment[best] = t
        load[t] += checked[best]
        heapq.heappush(heap, (load[t], t))
    return [s - 1 if s > remove else s for s in assignment]


def best_fit_move(
    assignment_whole: Sequence[int],
    sizes: Sequence[int],
    load_s: Sequence[float],
    bytes_per_s: Sequence[float],
) -> tuple[int, int, int] | None:
    """Exploit step of the PSLD reconstruction (comm.md §5.3, [R]): one best-fit key move.

    ``load_s[j]`` is server ``j``'s measured time per iteration (push + aggregate + pull, so it
    captures contention and CPU interference) and ``bytes_per_s[j]`` its effective rate; the
    number of servers is ``len(load_s)``. Source = the server with the largest time, destination
    = the one with the smallest (ties to the lower id). Assumed linear model: moving ``x`` bytes
    changes the source's time by ``-x / bytes_per_s[src]`` and the destination's by
    ``+x / bytes_per_s[dst]``; the ideal size equalising the two is
    ``x* = gap / (1/b_src + 1/b_dst)``, i.e. half the time gap converted to bytes when the two
    rates are equal. Among the source's non-empty keys whose move gives
    ``max(pred_src, pred_dst) < load_s[src]`` (the pair's maximum drops, so the overall maximum
    never rises and drops when the source is the unique slowest), return the one whose size is
    closest to ``x*`` (ties to the lower key) as ``(key, src, dst)``; ``None`` if there is none.
    """
    n_servers = len(load_s)
    _check_servers(n_servers, "len(load_s)")
    if len(bytes_per_s) != n_servers:
        raise ValueError(
            f"bytes_per_s: expected {n_servers} entries (one per server, as load_s), "
            f"got {len(bytes_per_s)}"
        )
    times = []
    for j, t in enumerate(load_s):
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"load_s[{j}] must be finite and >= 0, got {t!r}")
        times.append(float(t))
    rates = []
    for j, b in enumerate(bytes_per_s):
        if not math.isfinite(b) or b <= 0:
            raise ValueError(f"bytes_per_s[{j}] must be finite and > 0, got {b!r}")
        rates.append(float(b))
    checked = _check_sizes(sizes)
    assignment = _check_whole(assignment_whole, len(checked), n_servers)

    src = max(range(n_servers), key=lambda j: (times[j], -j))
    dst = min(range(n_servers), key=lambda j: (times[j], j))
    if src == dst:
        return None
    target = (times[src] - times[dst]) / (1 / rates[src] + 1 / rates[dst])
    best: tuple[float, int] | None = None
    for key, server in enumerate(assignment):
        size = checked[key]
        if server != src or size == 0:
            continue
        pred = max(times[src] - size / rates[src], times[dst] + size / rates[dst])
        if pred < times[src] and (best is None or abs(target - size) < best[0]):
            best = (abs(target - size), key)
    return None if best is None else (best[1], src, dst)
