"""runners.executors.slurm, against a FAKE Slurm (Slurm cannot run on this machine).

The ``fake_slurm`` fixture writes small Python programs named ``sbatch``, ``squeue``,
``scancel``, ``sacct``, ``srun`` and ``scontrol`` into a temporary folder put first on PATH. They
keep the jobs' state in another temporary folder (one JSON record per job):

* ``sbatch --parsable SCRIPT`` reads the script's ``#SBATCH`` lines, starts the script with bash
  in the background for real (its own session, stdout + stderr into ``--output``), so the real
  runner runs; records the pid and job name; prints ``<id>;fakecluster``. With
  ``FAKE_SBATCH_ERROR`` set it prints that message to stderr and exits 1.
* ``squeue -j ID -o %T`` prints RUNNING while a process of the job's group lives, else fails with
  "Invalid job id specified" (as Slurm does once it forgets a job); ``squeue -n NAME -o %i``
  lists the live jobs of that name. With ``FAKE_SQUEUE_ERROR`` set it fails with that message.
* ``scancel [--signal=TERM --full] ID`` signals (TERM, or KILL without ``--signal``) the job's
  process group and marks it cancelled.
* ``sacct`` reports RUNNING, CANCELLED, COMPLETED or FAILED from the record (or a state a test
  wrote into the record), and nothing for a job it never saw.
* ``scontrol show hostnames`` prints node1..nodeN; ``srun`` starts its command once per "node"
  (here, concurrently on this machine) with ``SLURM_NODEID`` set, and exits with the highest
  status.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.executors.base import (
    EXIT_CODE,
    LOG,
    RUN_DIR,
    SPEC,
    ExecutorError,
    Resources,
    Status,
)
from runners.executors.slurm import SCRIPT, SlurmExecutor, job_name

DEADLINE_S = 30.0
INTERVAL_S = 0.05
QUICK = {"system": "wfbp", "workload": "resnet50", "iterations": 3, "cluster": {"workers": 2}}
# Runs for minutes: stopped by the tests long before it ends.
ENDLESS = {
    "system": "wfbp",
    "workload": "vgg16",
    "iterations": 100_000,
    "cluster": {"workers": 64},
}
IMPOSSIBLE_PID = 2**22 + 4321  # Linux pids stay below 2**22

FAKE_SLURM = r"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_SLURM_STATE"])
UNKNOWN = "Invalid job id specified"


def record(job_id):
    try:
        return json.loads((STATE / f"{job_id}.json").read_text())
    except (OSError, ValueError):
        return None


def save(job_id, rec):
    tmp = STATE / f"{job_id}.json.tmp"
    tmp.write_text(json.dumps(rec))
    tmp.rename(STATE / f"{job_id}.json")


def alive(pgid):  # whether a live (non-zombie) process of the job's group remains
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def option(args, short, long=None):
    for i, arg in enumerate(args):
        if arg == short and i + 1 < len(args):
            return args[i + 1]
        if long and arg.startswith(long + "="):
            return arg.split("=", 1)[1]
    return None


def log_call(name, args):
    with open(STATE / "calls.log", "a") as f:
        f.write(json.dumps([name, *args]) + "\n")


def sbatch(args):
    if os.environ.get("FAKE_SBATCH_ERROR"):
        print(os.environ["FAKE_SBATCH_ERROR"], file=sys.stderr)
        return 1
    assert args[0] == "--parsable", args
    script = Path(args[-1])
    directives = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH "):].partition("=")
            directives[key] = value
    counter = STATE / "counter"
    job_id = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job_id))
    nodes = int(directives.get("--nodes", "1"))
    env = {
        **os.environ,
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
        "SLURM_JOB_NUM_NODES": str(nodes),
    }
    with open(directives["--output"], "w") as log:
        proc = subprocess.Popen(
            ["sh", "-c", 'bash "$1"; echo $? >"$2"', "job", str(script),
             str(STATE / f"{job_id}.rc")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
    save(job_id, {
        "pid": proc.pid,
        "name": directives.get("--job-name"),
        "cwd": os.getcwd(),
        "env": {k: os.environ.get(k) for k in ("LAB_TEST_VALUE", "CUDA_VISIBLE_DEVICES")},
    })
    print(f"{job_id};fakecluster")
    return 0


def squeue(args):
    if os.environ.get("FAKE_SQUEUE_ERROR"):
        print(os.environ["FAKE_SQUEUE_ERROR"], file=sys.stderr)
        return 1
    job_id, name = option(args, "-j", "--jobs"), option(args, "-n", "--name")
    if job_id is not None:
        rec = record(job_id)
        if rec is None or not alive(rec["pid"]):
            print(f"slurm_load_jobs error: {UNKNOWN}", file=sys.stderr)
            return 1
        print("RUNNING")
        return 0
    for path in sorted(STATE.glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("name") == name and alive(rec["pid"]):
            print(path.name.split(".")[0])
    return 0


def scancel(args):
    log_call("scancel", args)
    job_id = args[-1]
    rec = record(job_id)
    if rec is None or not alive(rec["pid"]):
        print(f"scancel: error: Kill job error on job id {job_id}: {UNKNOWN}", file=sys.stderr)
        return 1
    rec["cancelled"] = True
    save(job_id, rec)
    sig = signal.SIGTERM if "--signal=TERM" in args else signal.SIGKILL
    try:
        os.killpg(rec["pid"], sig)
    except ProcessLookupError:
        pass
    return 0


def sacct(args):
    job_id = option(args, "-j", "--jobs")
    rec = record(job_id)
    if rec is None:
        return 0
    if "sacct" in rec:
        print(rec["sacct"])
    elif alive(rec["pid"]):
        print("RUNNING|0:0")
    elif rec.get("cancelled"):
        print("CANCELLED by 1000|0:15")
    else:
        rc_file = STATE / f"{job_id}.rc"
        rc = int(rc_file.read_text()) if rc_file.exists() else 0
        print("COMPLETED|0:0" if rc == 0 else f"FAILED|{rc}:0")
    return 0


def scontrol(args):
    assert args[:2] == ["show", "hostnames"], args
    for k in range(int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))):
        print(f"node{k + 1}")
    return 0


def srun(args):
    tasks = int(option(args, "-n", "--ntasks") or "1")
    command = args[next(i for i, a in enumerate(args) if not a.startswith("-")):]
    with open(STATE / "srun.json", "w") as f:
        json.dump({k: os.environ.get(k) for k in ("LAB_RDZV_HOST", "LAB_NNODES")}, f)
    procs = [
        subprocess.Popen(command, env={**os.environ, "SLURM_NODEID": str(k),
                                       "SLURM_PROCID": str(k)})
        for k in range(tasks)
    ]
    return max(p.wait() for p in procs)


sys.exit(globals()[Path(sys.argv[0]).name](sys.argv[1:]))
"""
COMMANDS = ("sbatch", "squeue", "scancel", "sacct", "scontrol", "srun")


class FakeSlurm:
    def __init__(self, state: Path):
        self.state = state

    def records(self) -> dict[str, dict]:
        return {
            path.name.split(".")[0]: json.loads(path.read_text())
            for path in self.state.glob("*.json")
            if path.name[0].isdigit()
        }

    def calls(self, name: str) -> list[list[str]]:
        try:
            lines = (self.state / "calls.log").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [call[1:] for call in map(json.loads, lines) if call[0] == name]

    def submit(self, script: Path) -> str:
        """Submit ``script`` with the fake sbatch directly (not through the executor)."""
        out = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True
        )
        return out.stdout.strip().split(";")[0]

    def write_record(self, job_id: str, **fields) -> None:
        (self.state / f"{job_id}.json").write_text(json.dumps({"pid": IMPOSSIBLE_PID, **fields}))


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Fake Slurm commands first on PATH; every job still alive at teardown is killed."""
    bin_dir, state = tmp_path / "fake-bin", tmp_path / "fake-state"
    bin_dir.mkdir()
    state.mkdir()
    for name in COMMANDS:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{FAKE_SLURM}")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_STATE", str(state))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeSlurm(state)
    yield fake
    for rec in fake.records().values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(rec["pid"], signal.SIGKILL)


def wait_for(condition, what):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(INTERVAL_S)
    raise AssertionError(f"timed out after {DEADLINE_S} s waiting for {what}")


def wait_until_done(executor, home, handle):
    def done():
        status = executor.poll(home, handle)
        return status if status.state != "running" else None

    return wait_for(done, "the job to end")


def log_text(home):
    try:
        return (home / LOG).read_text()
    except FileNotFoundError:
        return ""


def home_with(tmp_path, spec, name="home"):
    home = tmp_path / name
    home.mkdir()
    (home / SPEC).write_text(json.dumps(spec))
    return home


def sbatch_lines(home):
    return [line for line in (home / SCRIPT).read_text().splitlines() if line.startswith("#SBATCH")]


def test_a_run_through_slurm_ends_with_exit_code_zero_and_a_run_directory(tmp_path, fake_slurm):
    executor = SlurmExecutor()
    home = home_with(tmp_path, QUICK)

    handle = executor.launch(home, 7, Resources())

    assert handle == "1000"  # the cluster name after ";" is dropped
    status = wait_until_done(executor, home, handle)
    assert status == Status("exited", 0), log_text(home)
    summary = json.loads((home / RUN_DIR / "summary.json").read_text())
    assert summary["metrics"]["iteration_time_s"] > 0
    assert (home / EXIT_CODE).read_text().strip() == "0"
    assert not (home / (EXIT_CODE + ".tmp")).exists()
    assert "iteration_time_s" in log_text(home)  # --output is the run's process.log
    assert fake_slurm.records()[handle]["name"] == "lab.run-7"
    assert fake_slurm.records()[handle]["cwd"] == str(home.resolve())


def test_a_failing_runner_records_its_exit_status(tmp_path, fake_slurm):
    executor = SlurmExecutor()
    home = home_with(tmp_path, {**QUICK, "cluster": {"workers": 0}})

    handle = executor.launch(home, 8, Resources())

    assert wait_until_done(executor, home, handle) == Status("exited", 2)
    assert "cluster.workers" in log_text(home)
    assert not (home / RUN_DIR).exists()


def test_the_batch_script_asks_for_the_resources_and_holds_no_user_text(tmp_path, fake_slurm):
    marker = "USER-TEXT-MARKER"
    spec = {**QUICK, "labels": {"note": f"{marker} $(touch pwned) `id`; rm -rf /"}}
    home = home_with(tmp_path, spec)
    executor = SlurmExecutor(partition="gpu", extra_sbatch=("--account=lab", "--qos=normal"))
    resources = Resources(
        gpus=("GPU-aaaa", "GPU-bbbb"),
        cpus=3.5,
        memory_gb=1.5,
        nodes=2,
        env={"LAB_TEST_VALUE": f"{marker} $(touch pwned)", "CUDA_VISIBLE_DEVICES": "GPU-aaaa"},
    )

    handle = executor.launch(home, 42, resources)

    script = (home / SCRIPT).read_text()
    assert sbatch_lines(home) == [
        "#SBATCH --job-name=lab.run-42",
        f"#SBATCH --output={home.resolve() / LOG}",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=1536M",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --qos=normal",
    ]
    assert marker not in script and "pwned" not in script
    assert "GPU-aaaa" not in script  # Slurm assigns the GPUs, not the ledger
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=4 " in script
    # Resources.env reaches the job through sbatch's environment, never through the script;
    # CUDA_VISIBLE_DEVICES is Slurm's to set.
    assert fake_slurm.records()[handle]["env"] == {
        "LAB_TEST_VALUE": f"{marker} $(touch pwned)",
        "CUDA_VISIBLE_DEVICES": None,
    }

    # The fake srun runs the runner once per "node": node 0 writes run/, node 1 run.node1/.
    assert wait_until_done(executor, home, handle) == Status("exited", 0), log_text(home)
    assert (home / RUN_DIR / "summary.json").is_file()
    assert (home / (RUN_DIR + ".node1") / "summary.json").is_file()
    srun_env = json.loads((fake_slurm.state / "srun.json").read_text())
    assert srun_env == {"LAB_RDZV_HOST": "node1", "LAB_NNODES": "2"}
    assert not (home / "pwned").exists()


def test_a_single_node_cpu_run_asks_for_no_gpus_and_no_limits(tmp_path, fake_slurm):
    home = home_with(tmp_path, QUICK)

    script = SlurmExecutor().batch_script(home, 3, Resources())

    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=lab.run-3",
        f"#SBATCH --output={home.resolve() / LOG}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
    ]
    assert "srun" not in script and "scontrol" not in script
    assert "exit_code.tmp && mv exit_code.tmp exit_code" in script


def test_find_recovers_the_job_by_run_id(tmp_path, fake_slurm):
    executor = SlurmExecutor()
    home = home_with(tmp_path, ENDLESS)
    handle = executor.launch(home, 11, Resources())

    assert executor.find(11) == handle
    assert executor.find(12) is None
    assert job_name(11) == "lab.run-11"


def test_stop_cancels_a_long_run_and_poll_then_reports_it_ended(tmp_path, fake_slurm):
    executor = SlurmExecutor()
    home = home_with(tmp_path, ENDLESS)
    handle = executor.launch(home, 5, Resources())
    wait_for(lambda: "run wfbp on vgg16" in log_text(home), "the run to start")
    assert executor.poll(home, handle) == Status("running")

    started = time.monotonic()
    assert executor.stop(home, handle, grace_s=10.0) is True
    assert time.monotonic() - started < 5  # the run obeyed SIGTERM: no need to wait it out

    status = executor.poll(home, handle)
    assert status.state == "exited"
    assert status.exit_code == 128 + signal.SIGTERM
    assert "cancelled" in status.reason.lower()
    assert fake_slurm.calls("scancel") == [["--signal=TERM", "--full", handle]]
    assert not (home / RUN_DIR).exists()
    assert executor.stop(home, handle) is False  # already gone
    assert executor.find(5) is None


def test_stop_kills_a_job_that_ignores_sigterm_after_the_grace_period(tmp_path, fake_slurm):
    script = tmp_path / "stubborn.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=lab.run-9\n#SBATCH --output={tmp_path / 'log'}\n"
        "trap '' TERM\nsleep 60\n"
    )
    handle = fake_slurm.submit(script)
    executor = SlurmExecutor()
    assert executor.poll(tmp_path, handle) == Status("running")

    assert executor.stop(tmp_path, handle, grace_s=0.5) is True

    assert fake_slurm.calls("scancel") == [["--signal=TERM", "--full", handle], [handle]]
    status = wait_until_done(executor, tmp_path, handle)
    assert status.state == "exited" and "CANCELLED" in status.reason


def test_an_sbatch_failure_raises_with_its_message(tmp_path, fake_slurm, monkeypatch):
    message = "sbatch: error: Batch job submission failed: Invalid account or account/partition"
    monkeypatch.setenv("FAKE_SBATCH_ERROR", message)
    home = home_with(tmp_path, QUICK)

    with pytest.raises(ExecutorError) as caught:
        SlurmExecutor(extra_sbatch=("--account=nope",)).launch(home, 1, Resources())

    assert message in str(caught.value)
    assert "--account" in str(caught.value)  # says what to check
    assert fake_slurm.records() == {}


def test_launch_without_a_spec_raises_file_not_found(tmp_path, fake_slurm):
    with pytest.raises(FileNotFoundError):
        SlurmExecutor().launch(tmp_path, 1, Resources())


def test_launch_removes_a_stale_exit_code(tmp_path, fake_slurm):
    executor = SlurmExecutor()
    home = home_with(tmp_path, ENDLESS)
    (home / EXIT_CODE).write_text("0\n")

    handle = executor.launch(home, 4, Resources())

    assert executor.poll(home, handle) == Status("running")


def test_a_home_that_cannot_appear_in_an_sbatch_line_is_refused(tmp_path, fake_slurm):
    home = home_with(tmp_path, QUICK, name="odd %j home")

    with pytest.raises(ExecutorError, match="SBATCH"):
        SlurmExecutor().launch(home, 1, Resources())

    assert fake_slurm.records() == {}


def test_a_job_neither_squeue_nor_sacct_knows_is_lost(tmp_path, fake_slurm):
    status = SlurmExecutor().poll(tmp_path, "424242")

    assert status.state == "lost"
    assert "424242" in status.reason
    assert SlurmExecutor().stop(tmp_path, "424242") is False


def test_a_job_that_timed_out_is_reported_with_slurms_reason(tmp_path, fake_slurm):
    fake_slurm.write_record("555", name="lab.run-3", sacct="TIMEOUT|0:15")
    fake_slurm.write_record("556", name="lab.run-4", sacct="OUT_OF_MEMORY|0:125")
    fake_slurm.write_record("557", name="lab.run-5", sacct="NODE_FAIL|1:0")

    timeout = SlurmExecutor().poll(tmp_path, "555")
    oom = SlurmExecutor().poll(tmp_path, "556")
    node_fail = SlurmExecutor().poll(tmp_path, "557")

    assert timeout.state == "exited" and timeout.exit_code == 128 + 15
    assert timeout.reason.startswith("slurm: TIMEOUT")
    assert oom.reason.startswith("slurm: OUT_OF_MEMORY") and oom.exit_code == 128 + 125
    assert node_fail.reason.startswith("slurm: NODE_FAIL") and node_fail.exit_code == 1


def test_the_exit_code_file_wins_over_slurm(tmp_path, fake_slurm):
    fake_slurm.write_record("600", name="lab.run-6", sacct="CANCELLED by 0|0:15")
    (tmp_path / EXIT_CODE).write_text("3\n")

    assert SlurmExecutor().poll(tmp_path, "600") == Status("exited", 3)
    assert SlurmExecutor().poll(tmp_path, "424242") == Status("exited", 3)


def test_an_unreachable_controller_raises_instead_of_losing_the_run(
    tmp_path, fake_slurm, monkeypatch
):
    monkeypatch.setenv(
        "FAKE_SQUEUE_ERROR", "slurm_load_jobs error: Unable to contact slurm controller"
    )

    with pytest.raises(ExecutorError, match="Unable to contact"):
        SlurmExecutor().poll(tmp_path, "1000")


def test_missing_slurm_commands_raise_an_executor_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    home = home_with(tmp_path, QUICK)

    with pytest.raises(ExecutorError, match="sbatch was not found"):
        SlurmExecutor().launch(home, 1, Resources())


@pytest.mark.parametrize(
    "option",
    [
        "account=x",  # not an option
        "-A",  # short options are not accepted
        "--account=a b",
        "--account=x\n#SBATCH --wrap=id",
        "--comment=\tx",
        "--",
        "--job-name=other",  # the executor's own
        "--output=/tmp/elsewhere",
    ],
)
def test_bad_extra_sbatch_options_are_rejected(option):
    with pytest.raises(ValueError):
        SlurmExecutor(extra_sbatch=(option,))


def test_bad_partitions_and_handles_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        SlurmExecutor(partition="gpu\n#SBATCH --wrap=id")
    with pytest.raises(ValueError):
        SlurmExecutor().poll(tmp_path, "--help")
