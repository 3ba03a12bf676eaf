"""The emulated network's pieces that need no root (the testbed itself: tests/integration)."""

import logging

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
