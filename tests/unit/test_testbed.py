"""The emulated network's pieces that need no root (the testbed itself: tests/integration)."""

import logging

import pytest

from runners.real import testbed


def test_cpu_mask_is_sysfs_s_format():
    assert testbed.cpu_mask([0, 1]) == "00000003"
    assert testbed.cpu_mask([]) == "00000000"
    assert testbed.cpu_mask([3]) == "00000008"
    # above 32 CPUs: groups of 32, the highest first
    assert testbed.cpu_mask([0, 33]) == "00000002,00000001"
    assert testbed.cpu_mask([64]) == "00000001,00000000,00000000"


def test_a_testbed_says_what_it_does_not_emulate():
    bed = testbed.Testbed("labnet-1-0", [1.0, 1.0], netem=True)
    assert bed.notes() == ""
    bed.netem = False
    assert bed.notes() == "latency not emulated (no netem qdisc): the testbed's own"
    bed.steered = False
    assert bed.notes().endswith("; a flow's packets may be reordered (no receive packet steering)")


def test_a_run_on_a_testbed_logs_what_it_does_not_emulate(caplog):
    from runners.real.launch import Network

    bed = testbed.Testbed("labnet-1-0", [1.0, 1.0], netem=True)
    network = Network("shaped")
    with caplog.at_level(logging.INFO, logger="runners"):
        network.on(bed)
    assert (network.latency_emulated, network.note, caplog.messages) == (True, "", [])
    bed.netem = False
    with caplog.at_level(logging.INFO, logger="runners"):
        network.on(bed)
    assert not network.latency_emulated
    assert caplog.messages == [
        "real run: shaped network: latency not emulated (no netem qdisc): the testbed's own"
    ]


def test_a_testbed_with_the_delay_line_says_so():
    bed = testbed.Testbed("labnet-1-0", [1.0, 1.0], latency_us=2000.0)
    bed.delay_line = object()  # a stand-in: only whether there is one matters to notes()
    assert bed.delayed
    assert bed.notes() == "2000 us a way added by a delay line in user space (no netem qdisc)"


def _shaped(latency_us: float):
    from runners.spec import validate

    return validate(
        {
            "system": "wfbp",
            "mode": "real",
            "workload": "vgg16-debug",
            "cluster": {"workers": 2, "latency_us": latency_us},
            "real": {"network": "shaped"},
        }
    )


@pytest.fixture
def shaping(monkeypatch):
    """The emulated network as root would have it, without root (only the checks run)."""
    from runners.real import launch

    monkeypatch.setattr(testbed, "can_shape", lambda: None)
    return launch


@pytest.mark.parametrize(
    ("latency_us", "delay", "netem", "words"),
    [
        (200_000.0, None, False, "adds at most 100000 us (got 200000)"),
        (2000.0, "the kernel has neither the netem qdisc nor nfnetlink_queue", False,
         "cannot add latency on this machine (the kernel has neither"),
    ],
)  # fmt: skip
def test_latency_the_testbed_cannot_add_is_refused_naming_the_field(
    shaping, monkeypatch, latency_us, delay, netem, words
):
    from runners.spec import SpecError

    monkeypatch.setattr(testbed, "can_delay", lambda: delay)
    monkeypatch.setattr(testbed, "netem_available", lambda: netem)
    with pytest.raises(SpecError) as caught:
        shaping.preflight(_shaped(latency_us))
    assert caught.value.field == "cluster.latency_us"
    assert words in str(caught.value)


def test_latency_is_accepted_where_the_delay_line_or_netem_can_add_it(shaping, monkeypatch):
    monkeypatch.setattr(testbed, "netem_available", lambda: False)
    monkeypatch.setattr(testbed, "can_delay", lambda: None)
    assert shaping.preflight(_shaped(2000.0)).kind == "shaped"
    monkeypatch.setattr(testbed, "can_delay", lambda: "no nfnetlink_queue")
    monkeypatch.setattr(testbed, "netem_available", lambda: True)
    assert shaping.preflight(_shaped(2000.0)).kind == "shaped"
    # up to the testbed's own latency nothing is added, so nothing need be able to
    monkeypatch.setattr(testbed, "netem_available", lambda: False)
    assert shaping.preflight(_shaped(testbed.NATIVE_LATENCY_US)).kind == "shaped"
