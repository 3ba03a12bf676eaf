"""``python -m runners run SPEC --out DIR`` on invalid specs: exit code 2, one line on stderr
naming the offending field with its dotted path, and nothing written (no --out, no staging
directory beside it). Most cases call ``runners.cli.main`` in-process (same code path as the
console entry point); a few go through a real subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runners import cli

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "system": "ps-default",
    "workload": "resnet50-debug",
    "iterations": 3,
    "warmup_iterations": 1,
    "cluster": {"workers": 4},
}


def spec_with(**changes):
    """BASE with top-level keys replaced; ``cluster``/``params`` dicts are merged into BASE's."""
    spec = {**BASE, **changes}
    spec["cluster"] = {**BASE["cluster"], **changes.get("cluster", {})}
    return spec


CASES = {
    "unknown-system": ("system", spec_with(system="no-such-scheduler")),
    "unknown-workload": ("workload", spec_with(workload="no-such-model")),
    "unknown-param": ("params.bogus", spec_with(params={"bogus": 1})),
    "param-below-minimum": (
        "params.slice_params",
        spec_with(system="p3", params={"slice_params": 0}),
    ),
    "param-order-groups-below-minimum": (
        "params.order_groups",
        spec_with(params={"order_groups": 0}),
    ),
    "param-not-a-choice": ("params.fusion", spec_with(system="pace", params={"fusion": "magic"})),
    "negative-bandwidth": ("cluster.bandwidth_gbps", spec_with(cluster={"bandwidth_gbps": -10})),
    "zero-bandwidth": ("cluster.bandwidth_gbps", spec_with(cluster={"bandwidth_gbps": 0})),
    "negative-server-bandwidth": (
        "cluster.server_bandwidth_gbps",
        spec_with(cluster={"server_bandwidth_gbps": -1}),
    ),
    "zero-server-bandwidth": (
        "cluster.server_bandwidth_gbps",
        spec_with(cluster={"server_bandwidth_gbps": 0}),
    ),
    "nan-bandwidth": (
        "cluster.bandwidth_gbps",
        spec_with(cluster={"bandwidth_gbps": float("nan")}),
    ),
    "infinite-server-bandwidth": (
        "cluster.server_bandwidth_gbps",
        spec_with(cluster={"server_bandwidth_gbps": float("inf")}),
    ),
    "boolean-ps": ("cluster.ps", spec_with(cluster={"ps": True})),
    "more-ps-than-servers": ("cluster.ps", spec_with(cluster={"ps": 9, "servers": 8})),
    "more-ps-than-default-servers": ("cluster.ps", spec_with(cluster={"ps": 9})),
    "straggler-on-missing-worker": (
        "cluster.stragglers[0].worker",
        spec_with(cluster={"stragglers": [{"worker": 4, "slowdown": 2}]}),
    ),
    "second-straggler-on-missing-worker": (
        "cluster.stragglers[1].worker",
        spec_with(
            cluster={"stragglers": [{"worker": 0, "slowdown": 2}, {"worker": -1, "slowdown": 2}]}
        ),
    ),
    "ps-straggler-on-missing-server": (
        "cluster.ps_stragglers[0].server",
        spec_with(cluster={"servers": 8, "ps_stragglers": [{"server": 8, "cpu_slowdown": 2}]}),
    ),
    "straggler-until-equals-from": (
        "cluster.stragglers[0].until_iteration",
        spec_with(
            cluster={
                "stragglers": [
                    {"worker": 0, "slowdown": 2, "from_iteration": 2, "until_iteration": 2}
                ]
            }
        ),
    ),
    "ps-straggler-until-before-from": (
        "cluster.ps_stragglers[0].until_iteration",
        spec_with(
            cluster={
                "ps_stragglers": [
                    {
                        "server": 0,
                        "bandwidth_factor": 0.5,
                        "from_iteration": 4,
                        "until_iteration": 1,
                    }
                ]
            }
        ),
    ),
    "ps-straggler-until-zero": (
        "cluster.ps_stragglers[0].until_iteration",
        spec_with(cluster={"ps_stragglers": [{"server": 0, "until_iteration": 0}]}),
    ),
    "missing-measured-profile": ("cluster.gpu", spec_with(cluster={"gpu": "measured:nope"})),
    # A spec reaches a container only through fields the executor defines: nothing else.
    "container-options": ("docker", spec_with(docker={"privileged": True})),
    "real-privileged": (
        "real.privileged",
        spec_with(mode="real", workload="vgg16-debug", real={"privileged": True}),
    ),
    "real-host-mount": (
        "real.volumes",
        spec_with(mode="real", workload="vgg16-debug", real={"volumes": ["/:/host"]}),
    ),
    "gpu-model-shell": (
        "real.gpu_model",
        spec_with(mode="real", workload="vgg16-debug", real={"gpu_model": "A100; rm -rf /"}),
    ),
    "negative-gpus": (
        "real.gpus",
        spec_with(mode="real", workload="vgg16-debug", real={"gpus": -1}),
    ),
    "device-not-a-choice": (
        "real.device",
        spec_with(mode="real", workload="vgg16-debug", real={"device": "tpu"}),
    ),
    "cuda-in-the-ps-arena": (  # BASE is ps-default: its real mode trains on the CPU
        "real.device",
        spec_with(mode="real", workload="vgg16-debug", real={"device": "cuda"}),
    ),
    "cuda-with-fewer-gpus-than-ranks": (
        "real.gpus",
        spec_with(
            system="wfbp",
            mode="real",
            workload="vgg16-debug",
            cluster={"workers": 2},
            real={"device": "cuda", "gpus": 1},
        ),
    ),  # fmt: skip
}
# One per kind of check, through a real ``python -m runners`` process.
SUBPROCESS_CASES = [
    "unknown-system",
    "param-not-a-choice",
    "more-ps-than-servers",
    "ps-straggler-on-missing-server",
    "missing-measured-profile",
]


def write_spec(tmp_path, spec):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def leftovers(out):
    """Anything ``run`` may have created for ``out``: the directory or its staging siblings."""
    parent = out.parent
    if not parent.exists():
        return []
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((out.name, f".{out.name}")))


def check_rejected(returncode, stdout, stderr, field, out):
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"invalid spec: {field}: "), lines[0]
    assert stdout == ""
    assert not out.exists()
    assert leftovers(out) == []


@pytest.mark.parametrize(("field", "spec"), list(CASES.values()), ids=list(CASES))
def test_run_rejects_the_spec_naming_the_field_and_writes_nothing(tmp_path, capsys, field, spec):
    """Validation happens before anything touches the file system, and the one error line
    starts with the dotted path of the offending field."""
    spec_path = write_spec(tmp_path, spec)
    out = tmp_path / "runs" / "r1"

    code = cli.main(["run", str(spec_path), "--out", str(out)])

    captured = capsys.readouterr()
    check_rejected(code, captured.out, captured.err, field, out)
    assert not out.parent.exists()  # not even the parent is created


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_run_as_a_subprocess_exits_two_with_one_line(tmp_path, case):
    """The same contract at the process boundary: exit status 2, a single stderr line (no
    traceback, no log lines), an empty stdout, no --out and no staging directory."""
    field, spec = CASES[case]
    spec_path = write_spec(tmp_path, spec)
    out = tmp_path / "out"

    proc = subprocess.run(
        [sys.executable, "-m", "runners", "run", str(spec_path), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    check_rejected(proc.returncode, proc.stdout, proc.stderr, field, out)


def test_a_valid_spec_is_accepted_so_the_cases_fail_for_their_own_reason(tmp_path, capsys):
    """BASE itself runs (exit 0, --out written): every rejection above comes from its one
    change."""
    spec_path = write_spec(tmp_path, BASE)
    out = tmp_path / "ok"

    code = cli.main(["run", str(spec_path), "--out", str(out)])

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (out / "summary.json").exists()
    assert json.loads(captured.out.splitlines()[-1])["run"]["system"] == "ps-default"
