"""``runners.real.ps``'s choice of transport (``real.ps_transport``) and the pipelined one's
receive buffers: sized for the run's largest message, at most ``INLINE_BYTES`` (a larger
payload follows its header), so a model with a 100 MB layer does not post 100 MB buffers."""

from __future__ import annotations

import threading

from runners.real import ps


def _keys(*sizes: int) -> list[ps.Key]:
    return [ps.Key(i, i, 0, n, i, []) for i, n in enumerate(sizes)]


def _context(transport: str | None) -> ps.Context:
    real = {} if transport is None else {"ps_transport": transport}
    return ps.Context({"spec": {"real": real}}, 0, [0, 1, 2])


def test_a_message_s_largest_payload_is_a_migration_a_pull_or_an_assignment():
    assert ps.max_message_numel(_keys(10, 300, 20)) == 600  # a key's parameters and momentum
    assert ps.max_message_numel(_keys(*[1] * 50)) == 50  # PSLD's assignment of every key
    assert ps.max_message_numel([]) == 1


def test_the_spec_chooses_the_transport_and_bounds_the_posted_buffers():
    cv = threading.Condition()
    blocking = ps.channel_for(_context(None), cv, lambda *a: None, _keys(10))
    assert type(blocking) is ps.Channel  # jobs from before the field, and the default
    assert type(ps.channel_for(_context("blocking"), cv, lambda *a: None, _keys(10))) is ps.Channel
    small = ps.channel_for(_context("pipelined"), cv, lambda *a: None, _keys(10, 300))
    assert isinstance(small, ps.PipelinedChannel) and small.inline_numel == 600
    # vgg16's largest layer (102.8 MB): receives of 4 MiB, the payload after its header
    big = ps.channel_for(_context("pipelined"), cv, lambda *a: None, _keys(25_700_000))
    assert big.inline_numel == ps.INLINE_BYTES // 4
    # a sender and a receiver thread per peer (two peers here)
    assert [t.name for t in big._threads] == ["ps-send", "ps-recv", "ps-recv"]
