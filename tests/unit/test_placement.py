"""runners.policies.placement: MXNet/BytePS default key->server rules, whole-key baselines and
the PSLD mechanism moves (scale-out, scale-in, best-fit exploit step)."""

from __future__ import annotations

import numpy as np
import pytest

from runners.policies.placement import (
    best_fit_move,
    byteps_default,
    mxnet_default,
    random_assignment,
    round_robin,
    scale_in,
    scale_out,
    server_loads,
    whole_to_parts,
)


def assert_parts_sum(parts, sizes):
    assert len(parts) == len(sizes)
    for pieces, size in zip(parts, sizes, strict=True):
        assert sum(nbytes for _, nbytes in pieces) == size
        assert all(nbytes >= 0 for _, nbytes in pieces)


# ------------------------------------------------------------------------------ MXNet rule
def test_mxnet_small_arrays_hash_by_key():
    sizes = [400] * 6  # 100 elements each, far below the bound
    parts = mxnet_default(sizes, 4)
    # key 3: 3 * 9973 = 29919, 29919 % 4 = 3; key 1: 9973 % 4 = 1; key 2: 19946 % 4 = 2;
    # key 4: 39892 % 4 = 0; key 5: 49865 % 4 = 1.
    assert [p[0][0] for p in parts] == [0, 1, 2, 3, 0, 1]
    # 3 servers: 9973 = 3 * 3324 + 1 -> key k on k % 3.
    assert [p[0][0] for p in mxnet_default(sizes, 3)] == [0, 1, 2, 0, 1, 2]
    # 7 servers: 9973 = 7 * 1424 + 5 -> key 1 on 5, key 2 on 10 % 7 = 3.
    assert [p[0][0] for p in mxnet_default(sizes[:3], 7)] == [0, 5, 3]
    assert_parts_sum(parts, sizes)


def test_mxnet_big_arrays_split_exactly():
    # 3,000,001 elements (+3 stray bytes) over 4 servers; cumulative shares 750000.25,
    # 1500000.5, 2250000.75 round (halves away from zero, like C) to 750000, 1500001, 2250001:
    # parts 750000, 750001, 750000, 750000 elements; the 3 stray bytes go to the last part.
    size = 4 * 3_000_001 + 3
    [pieces] = mxnet_default([size], 4)
    assert pieces == [(0, 3_000_000), (1, 3_000_004), (2, 3_000_000), (3, 3_000_003)]
    # The bound itself is "big" (>= bound splits), one below is whole.
    assert len(mxnet_default([4 * 1_000_000], 3)[0]) == 3
    assert len(mxnet_default([4 * 999_999], 3)[0]) == 1
    assert mxnet_default([4 * 10], 2, bigarray_bound_elems=10) == [[(0, 20), (1, 20)]]


def test_mxnet_parts_sum_on_many_sizes():
    rng = np.random.default_rng(0)
    sizes = [int(s) for s in rng.integers(0, 20_000_000, size=200)]
    for servers in (1, 2, 3, 5, 8):
        parts = mxnet_default(sizes, servers)
        assert_parts_sum(parts, sizes)
        assert sum(server_loads(parts, servers)) == sum(sizes)


# ------------------------------------------------------------------------------ BytePS rule
def test_byteps_partitions_and_hash():
    sizes = [10_000_000, 0, 4_096_000, 1]
    parts = byteps_default(sizes, 3)
    # 10,000,000 B -> 3 partitions (4,096,000 + 4,096,000 + 1,808,000), keys 0, 1, 2 ->
    # servers 0, 9973 % 3 = 1, 19946 % 3 = 2; the empty tensor has no partitions;
    # key 3 -> 29919 % 3 = 0; key 4 -> 39892 % 3 = 1.
    assert parts == [
        [(0, 4_096_000), (1, 4_096_000), (2, 1_808_000)],
        [],
        [(0, 4_096_000)],
        [(1, 1)],
    ]
    assert_parts_sum(parts, sizes)


def test_byteps_partition_counts():
    sizes = [1, 4_095_999, 4_096_000, 4_096_001, 3 * 4_096_000, 3 * 4_096_000 + 7]
    parts = byteps_default(sizes, 4)
    assert [len(p) for p in parts] == [1, 1, 1, 2, 3, 4]
    assert_parts_sum(parts, sizes)
    assert [len(p) for p in byteps_default([100], 2, partition_bytes=30)] == [4]


# ------------------------------------------------------------------- baselines and loads
def test_round_robin_random_and_loads():
    sizes = [10, 20, 30, 40, 50]
    rr = round_robin(sizes, 2)
    assert rr == [0, 1, 0, 1, 0]
    assert server_loads(whole_to_parts(rr, sizes), 2) == [90, 60]
    a = random_assignment(sizes, 3, np.random.default_rng(7))
    b = random_assignment(sizes, 3, np.random.default_rng(7))
    assert a == b and len(a) == 5 and all(0 <= s < 3 for s in a)
    assert sum(server_loads(whole_to_parts(a, sizes), 3)) == 150


# ------------------------------------------------------------------------------ scale-out
def test_scale_out_hand_checked():
    # loads [60, 40], total 100, avg over 3 = 33.3. Server 0 (60): overflow 26.7, keys 40/20
    # -> 20 fits best (|26.7 - 20| = 6.7) -> new = 20, loads [40, 40, 20]. Server 0 again
    # (tie, lower id): only key 0 (40) left, 20 + 40 >= 40 -> no move, dropped. Server 1 (40):
    # overflow 6.7, key 3 (10) reduces the gap (key 1 of 30 would not) -> [40, 30, 30].
    # Server 1 (30) is below avg -> stop.
    sizes = [40, 30, 20, 10]
    out = scale_out([0, 1, 0, 1], sizes, 2)
    assert out == [0, 1, 2, 2]
    assert server_loads(whole_to_parts(out, sizes), 3) == [40, 30, 30]


def test_scale_out_reduces_max_load():
    rng = np.random.default_rng(3)
    sizes = [int(s) for s in rng.integers(1_000, 200_000, size=120)]
    before = random_assignment(sizes, 4, rng)
    after = scale_out(before, sizes, 4)
    old = server_loads(whole_to_parts(before, sizes), 4)
    new = server_loads(whole_to_parts(after, sizes), 5)
    assert max(new) < max(old)
    assert new[4] >= sum(sizes) / 5  # many small keys: the new server reaches the average
    assert sum(new) == sum(old)
    # keys only move onto the new server
    assert all(a == b or a == 4 for a, b in zip(after, before, strict=True))


def test_scale_out_single_huge_key_stays():
    # One key holds everything: moving it would not reduce the imbalance.
    assert scale_out([0, 0], [100, 0], 1) == [0, 0]


# ------------------------------------------------------------------------------- scale-in
def test_scale_in_hand_checked():
    # loads [40, 55, 30]; remove server 1 (keys 1: 30 B, 4: 25 B). avg over 2 = 62.5.
    # Least loaded = server 2 (30): deficit 32.5 -> key 1 (30) fits best -> 60.
    # Least loaded = server 0 (40): deficit 22.5 -> key 4 (25) -> 65.
    # Renumber: 0 -> 0, 2 -> 1.
    sizes = [40, 30, 20, 10, 25]
    out = scale_in([0, 1, 2, 2, 1], sizes, 3, remove=1)
    assert out == [0, 1, 1, 1, 0]
    assert server_loads(whole_to_parts(out, sizes), 2) == [65, 60]


def test_scale_in_empties_removed_server_and_keeps_keys():
    rng = np.random.default_rng(5)
    sizes = [int(s) for s in rng.integers(0, 100_000, size=80)]
    before = random_assignment(sizes, 5, rng)
    for remove in range(5):
        after = scale_in(before, sizes, 5, remove)
        assert len(after) == len(sizes)
        assert all(0 <= s < 4 for s in after)
        # keys not on the removed server keep their (renumbered) server
        for a, b in zip(after, before, strict=True):
            if b != remove:
                assert a == (b - 1 if b > remove else b)
        assert sum(server_loads(whole_to_parts(after, sizes), 4)) == sum(sizes)


# -------------------------------------------------------------------------- best-fit move
def test_best_fit_move_reduces_predicted_max():
    # bytes [200, 10] at 100 B/s each -> times [2.0, 0.1]; x* = 1.9 / (1/100 + 1/100) = 95 B.
    # Key 0 (100 B) fits best: predicted [1.0, 1.1], max 1.1 < 2.0.
    sizes = [100, 60, 40, 10]
    move = best_fit_move([0, 0, 0, 1], sizes, [2.0, 0.1], [100.0, 100.0])
    assert move == (0, 0, 1)


def test_best_fit_move_uses_measured_time_not_bytes():
    # Same bytes on both servers, but server 1 is slow (interference): move from 1 to 0.
    sizes = [50, 50, 50, 50]
    move = best_fit_move([0, 0, 1, 1], sizes, [1.0, 3.0], [100.0, 50.0])
    assert move is not None
    key, src, dst = move
    assert (src, dst) == (1, 0) and key in (2, 3)
    assert key == 2  # tie between equal sizes -> lower key


def test_best_fit_move_none_when_balanced():
    # gap 0.1 s -> x* = 5 B, but the only key (100 B) would overshoot: 0.9 + 1.0 > 1.0.
    assert best_fit_move([0, 1], [100, 90], [1.0, 0.9], [100.0, 100.0]) is None
    assert best_fit_move([0, 1], [100, 100], [1.0, 1.0], [100.0, 100.0]) is None
    assert best_fit_move([0], [100], [1.0], [100.0]) is None  # a single server


# ------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "call",
    [
        lambda: mxnet_default([4], 0),
        lambda: byteps_default([4], 0),
        lambda: round_robin([4], 0),
        lambda: random_assignment([4], 0, np.random.default_rng(0)),
        lambda: server_loads([[(0, 4)]], 0),
        lambda: scale_out([0], [4], 0),
    ],
)
def test_servers_must_be_positive(call):
    with pytest.raises(ValueError, match="servers"):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: mxnet_default([4, -1], 2),
        lambda: byteps_default([4, -1], 2),
        lambda: round_robin([4, -1], 2),
        lambda: scale_out([0, 1], [4, -1], 2),
        lambda: scale_in([0, 1], [4, -1], 2, 0),
        lambda: best_fit_move([0, 1], [4, -1], [1.0, 1.0], [1.0, 1.0]),
    ],
)
def test_negative_sizes(call):
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        call()


def test_other_arguments_validated():
    with pytest.raises(ValueError, match="bigarray_bound_elems"):
        mxnet_default([4], 2, bigarray_bound_elems=0)
    with pytest.raises(ValueError, match="partition_bytes"):
        byteps_default([4], 2, partition_bytes=0)
    with pytest.raises(ValueError, match="assignment_whole"):
        scale_out([0], [4, 4], 2)
    with pytest.raises(ValueError, match=r"assignment_whole\[1\]"):
        scale_out([0, 2], [4, 4], 2)
    with pytest.raises(ValueError, match="remove"):
        scale_in([0, 1], [4, 4], 2, remove=2)
    with pytest.raises(ValueError, match="servers"):
        scale_in([0, 0], [4, 4], 1, remove=0)
    with pytest.raises(ValueError, match="bytes_per_s"):
        best_fit_move([0, 1], [4, 4], [1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match=r"bytes_per_s\[0\]"):
        best_fit_move([0, 1], [4, 4], [1.0, 1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"load_s\[1\]"):
        best_fit_move([0, 1], [4, 4], [1.0, -1.0], [1.0, 1.0])
