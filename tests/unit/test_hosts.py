"""GPU hosts and the GPU ledger (``lab.hosts``): nvidia-smi parsing, host registration, claims,
capacity checks, the register_host command and the Hosts page.

There is no GPU on the machines that run these tests: ``nvidia-smi`` is a FAKE shell script
put first on PATH (``fake_smi``), which prints what the test wrote for the two queries the
ledger makes (and fails if it is called with any other arguments). The concurrency of claims
on a real PostgreSQL is tested in ``tests/integration/test_gpu_ledger.py``.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from lab import actions
from lab.hosts import ledger
from lab.hosts.models import Gpu, GpuClaim, Host
from lab.runs.models import Run

pytestmark = pytest.mark.django_db

UUID_0 = "GPU-0aaaaaaa-1111-2222-3333-444444444444"
UUID_1 = "GPU-1bbbbbbb-1111-2222-3333-444444444444"
UUID_2 = "GPU-2ccccccc-1111-2222-3333-444444444444"
H100 = "NVIDIA H100 80GB HBM3"

FAKE_SMI = """#!/bin/sh
here=$(dirname "$0")
if [ -f "$here/fail" ]; then cat "$here/fail"; exit 9; fi
case "$*" in
  "--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits")
    cat "$here/gpus.csv" ;;
  "--query-compute-apps=gpu_uuid,pid --format=csv,noheader")
    cat "$here/apps.csv" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


@dataclass
class FakeSmi:
    """A fake ``nvidia-smi`` first on PATH; set what it prints with ``gpus`` and ``apps``."""

    bin: Path

    def gpus(self, *lines: str) -> None:
        (self.bin / "gpus.csv").write_text("".join(line + "\n" for line in lines))

    def apps(self, *lines: str) -> None:
        (self.bin / "apps.csv").write_text("".join(line + "\n" for line in lines))

    def fail(self, message: str) -> None:
        (self.bin / "fail").write_text(message + "\n")


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> FakeSmi:
    """Two H100s; GPU 1 runs a compute process that is not ours."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(FAKE_SMI)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    fake = FakeSmi(bin_dir)
    fake.gpus(f"0, {UUID_0}, {H100}, 81559", f"1, {UUID_1}, {H100}, 81559")
    fake.apps(f"{UUID_1}, 4242")
    return fake


@pytest.fixture
def no_smi(tmp_path, monkeypatch) -> None:
    """A PATH on which there is no nvidia-smi at all."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def runs(user, config) -> list[Run]:
    """Four queued runs of one experiment (nothing is launched)."""
    return list(actions.create_experiment(user, config).runs.all())


def add_host(name: str, *models: str, busy: tuple[int, ...] = ()) -> Host:
    """A host with one GPU per model, made directly in the database (another machine)."""
    host = Host.objects.create(name=name, queue=f"host.{name}", cpus=8, memory_gb=64)
    for index, model in enumerate(models):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-{name}-{index}",
            model=model,
            memory_mb=40960,
            busy_external=index in busy,
        )
    return host


# --- nvidia-smi ----------------------------------------------------------------------------


def test_discover_gpus_parses_nvidia_smi(fake_smi):
    assert ledger.discover_gpus() == [
        ledger.GpuInfo(index=0, uuid=UUID_0, model=H100, memory_mb=81559),
        ledger.GpuInfo(index=1, uuid=UUID_1, model=H100, memory_mb=81559),
    ]
    assert ledger.busy_uuids() == {UUID_1}


def test_parsing_copes_with_odd_values():
    gpus = ledger.parse_gpu_query("3, GPU-x, Tesla V100, PCIe, [N/A]\n\n")
    assert gpus == [ledger.GpuInfo(index=3, uuid="GPU-x", model="Tesla V100, PCIe", memory_mb=0)]
    assert ledger.parse_apps_query("") == set()
    assert ledger.parse_apps_query("GPU-a, 1\nGPU-a, 2\nGPU-b, 3\n") == {"GPU-a", "GPU-b"}


def test_without_nvidia_smi_there_are_no_gpus(no_smi):
    assert ledger.discover_gpus() == []
    assert ledger.busy_uuids() == set()


def test_a_failing_nvidia_smi_is_an_error_but_no_devices_is_none(fake_smi):
    fake_smi.fail("No devices were found")
    assert ledger.discover_gpus() == []
    fake_smi.fail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(ledger.GpuQueryError, match="exited 9: NVIDIA-SMI has failed"):
        ledger.discover_gpus()


# --- registration --------------------------------------------------------------------------


def test_register_host_creates_the_host_and_its_gpus(fake_smi):
    host = ledger.register_host("gpu-box", executor="docker")
    assert (host.name, host.queue, host.executor, host.active) == (
        "gpu-box",
        "host.gpu-box",
        "docker",
        True,
    )
    assert host.cpus >= 1 and host.memory_gb > 0 and host.last_seen is not None
    gpus = list(host.gpus.order_by("index"))
    assert [(g.index, g.uuid, g.model, g.memory_mb) for g in gpus] == [
        (0, UUID_0, H100, 81559),
        (1, UUID_1, H100, 81559),
    ]
    assert [g.busy_external for g in gpus] == [False, True]
    assert all(g.present and g.last_checked for g in gpus)
    assert ledger.register_host("other", queue="gpu-q").queue == "gpu-q"


def test_register_host_refuses_an_unknown_executor(fake_smi):
    with pytest.raises(ValueError, match="executor: 'k8s' is not one of local, docker, slurm"):
        ledger.register_host("gpu-box", executor="k8s")


def test_re_registering_after_a_gpu_disappears_marks_it_removed(fake_smi):
    first = ledger.register_host("gpu-box")
    seen = first.last_seen
    fake_smi.gpus(f"0, {UUID_0}, {H100}, 81559")
    fake_smi.apps()
    host = ledger.register_host("gpu-box")
    assert Host.objects.count() == 1 and host.last_seen >= seen
    assert dict(host.gpus.values_list("uuid", "present")) == {UUID_0: True, UUID_1: False}
    assert ledger.capacity() == 1
    # A new GPU appears in its slot, and later the old one comes back.
    fake_smi.gpus(f"0, {UUID_0}, {H100}, 81559", f"1, {UUID_2}, {H100}, 81559")
    ledger.register_host("gpu-box")
    fake_smi.gpus(f"0, {UUID_0}, {H100}, 81559", f"1, {UUID_1}, {H100}, 81559")
    ledger.register_host("gpu-box")
    assert dict(host.gpus.values_list("uuid", "present")) == {
        UUID_0: True,
        UUID_1: True,
        UUID_2: False,
    }


def test_register_host_command_prints_the_gpus(fake_smi):
    out = io.StringIO()
    call_command("register_host", "--name", "gpu-box", "--executor", "slurm", stdout=out)
    text = out.getvalue()
    assert "host gpu-box: queue host.gpu-box, executor slurm" in text
    assert "2 GPUs:" in text
    assert f"0  {UUID_0}  {H100}  81559 MiB  ok" in text
    assert f"1  {UUID_1}  {H100}  81559 MiB  busy (external process)" in text


def test_register_host_command_works_without_gpus_and_names_the_machine(no_smi):
    out = io.StringIO()
    call_command("register_host", stdout=out)
    host = Host.objects.get()
    assert host.name == ledger.this_hostname() and host.queue == f"host.{host.name}"
    assert not host.gpus.exists()
    assert "no GPUs found" in out.getvalue()


def test_register_host_command_reports_a_failing_nvidia_smi(fake_smi):
    fake_smi.fail("driver mismatch")
    with pytest.raises(Exception, match="nvidia-smi failed, nothing registered"):
        call_command("register_host", "--name", "gpu-box", stdout=io.StringIO())
    assert not Host.objects.exists()


def test_refresh_busy_tracks_external_processes_but_not_our_runs(fake_smi, runs):
    host = ledger.register_host("gpu-box")
    assert [g.uuid for g in ledger.claim_gpus(runs[0], 1)] == [UUID_0]
    fake_smi.apps(f"{UUID_0}, 100")  # our run now computes on GPU 0; the other process ended
    assert ledger.refresh_busy(host) == 0
    assert not Gpu.objects.filter(busy_external=True).exists()
    ledger.release_gpus(runs[0])  # released, but its process lingers: not ours any more
    assert ledger.refresh_busy("gpu-box") == 1
    assert Gpu.objects.get(uuid=UUID_0).busy_external


# --- claims --------------------------------------------------------------------------------


def test_claims_hand_out_free_gpus_only_never_the_busy_one(fake_smi, runs):
    ledger.register_host("gpu-box")
    first = ledger.claim_gpus(runs[0], 1)
    assert [g.uuid for g in first] == [UUID_0]
    with pytest.raises(ledger.NotEnoughGpus):
        ledger.claim_gpus(runs[1], 1)  # GPU 1 is busy with someone else's process
    assert GpuClaim.objects.filter(released_at__isnull=True).count() == 1


def test_claims_are_idempotent_and_release_frees_them(fake_smi, runs):
    ledger.register_host("gpu-box")
    fake_smi.apps()
    ledger.refresh_busy("gpu-box")
    gpus = ledger.claim_gpus(runs[0], 2)
    assert [g.uuid for g in gpus] == [UUID_0, UUID_1]
    assert ledger.claim_gpus(runs[0], 2) == gpus  # the same claims, nothing new
    assert GpuClaim.objects.filter(run=runs[0]).count() == 2
    assert ledger.held_gpus(runs[0]) == gpus
    with pytest.raises(ledger.NotEnoughGpus):
        ledger.claim_gpus(runs[1], 1)
    assert ledger.release_gpus(runs[0]) == 2
    assert ledger.release_gpus(runs[0]) == 0
    assert ledger.held_gpus(runs[0]) == []
    assert len(ledger.claim_gpus(runs[1], 2)) == 2
    assert ledger.claim_gpus(runs[2], 0) == []


def test_all_gpus_of_a_run_are_on_one_host(runs):
    add_host("host-a", "A100", "A100", "A100", busy=(2,))  # 2 free
    add_host("host-b", "A100", "A100", "A100", "A100")  # 4 free
    add_host("host-c", "H100", "H100")
    three = ledger.claim_gpus(runs[0], 3)
    assert {g.host.name for g in three} == {"host-b"}
    # The host with the fewest free GPUs that fits is chosen: host-b (1 left), not host-a (2).
    one = ledger.claim_gpus(runs[1], 1, model="a100")
    assert one[0].host.name == "host-b"
    two = ledger.claim_gpus(runs[2], 2, model="A100")
    assert {g.host.name for g in two} == {"host-a"}
    assert {g.host.name for g in ledger.claim_gpus(runs[3], 1, host="host-c")} == {"host-c"}
    claimed = list(GpuClaim.objects.values_list("gpu_id", flat=True))
    assert len(claimed) == len(set(claimed)) == 7


def test_not_enough_gpus_says_what_was_asked_and_what_is_free_where(runs):
    add_host("host-a", "A100", "A100", "A100", busy=(2,))
    add_host("host-b", "A100", "A100")
    ledger.claim_gpus(runs[0], 1, host="host-b")
    with pytest.raises(ledger.NotEnoughGpus) as err:
        ledger.claim_gpus(runs[1], 3, model="A100")
    assert str(err.value) == (
        f"run {runs[1].pk} asks for 3 GPUs of model 'A100' on one host; free now: "
        "host-a 2 of 3 (1 busy with other processes); host-b 1 of 2 (1 claimed)"
    )
    assert err.value.free == {"host-a": 2, "host-b": 1}
    assert (err.value.count, err.value.model) == (3, "A100")
    with pytest.raises(ledger.NotEnoughGpus, match="no active host has such GPUs"):
        ledger.claim_gpus(runs[1], 1, model="H100")
    Host.objects.filter(name="host-a").update(active=False)
    with pytest.raises(ledger.NotEnoughGpus, match="no active host named 'host-a' has"):
        ledger.claim_gpus(runs[1], 1, host="host-a")
    assert not GpuClaim.objects.filter(run=runs[1]).exists()


def test_the_database_refuses_a_second_active_claim_on_a_gpu(runs):
    gpu = add_host("host-a", "A100").gpus.get()
    GpuClaim.objects.create(gpu=gpu, run=runs[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuClaim.objects.create(gpu=gpu, run=runs[1])
    GpuClaim.objects.filter(run=runs[0]).update(released_at="2030-01-01T00:00:00Z")
    GpuClaim.objects.create(gpu=gpu, run=runs[1])  # released claims do not count


# --- capacity ------------------------------------------------------------------------------


def test_capacity_is_the_largest_single_host():
    assert ledger.capacity() == 0
    add_host("host-a", "A100", "A100")
    add_host("host-b", "H100", "H100", "H100", busy=(0,))
    assert ledger.capacity() == 3  # busy or claimed GPUs still count: they will free up
    assert ledger.capacity("a100") == 2
    assert ledger.capacity("V100") == 0


def test_check_request_names_the_field_and_the_largest_host():
    add_host("host-a", "A100", "A100")
    add_host("host-b", "A100")
    ledger.check_request(2)
    ledger.check_request(0)
    with pytest.raises(ValueError) as err:
        ledger.check_request(4)
    assert str(err.value) == "real.gpus: 4 GPUs asked, the largest host has 2 (host-a)"
    with pytest.raises(ValueError) as err:
        ledger.check_request(3, model="A100", field="gpus")
    assert str(err.value) == (
        "gpus: 3 GPUs of model 'A100' asked, the largest host has 2 GPUs of model 'A100' (host-a)"
    )
    with pytest.raises(ValueError, match=r"^real.gpus: 1 GPU of model 'H100' asked, but no"):
        ledger.check_request(1, model="H100")
    with pytest.raises(ValueError, match=r"^real.gpus: -1 GPUs asked"):
        ledger.check_request(-1)


# --- the Hosts page ------------------------------------------------------------------------


def test_the_hosts_page_needs_login(client: Client):
    response = client.get(reverse("hosts"))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_the_hosts_page_shows_hosts_gpus_and_the_claiming_run(client, user, fake_smi, runs):
    ledger.register_host("gpu-box")
    add_host("cpu-box")
    run = runs[0]
    ledger.claim_gpus(run, 1)
    client.force_login(user)
    response = client.get(reverse("hosts"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{reverse("hosts")}"' in html  # the nav link
    assert "host.gpu-box" in html and "cpu-box" in html and "CPU-only host" in html
    assert UUID_0 in html and UUID_1 in html and H100 in html
    run_link = reverse("experiment-detail", args=[run.experiment_id]) + f"#run-{run.pk}"
    assert f'<a href="{run_link}">run {run.pk}</a>' in html
    assert "busy (external)" in html
    ledger.release_gpus(run)
    html = client.get(reverse("hosts")).content.decode()
    assert f"run {run.pk}" not in html and ">free<" in html


def test_the_admin_lists_hosts_gpus_and_claims(client, staff, runs):
    host = add_host("host-a", "A100", "A100")
    ledger.claim_gpus(runs[0], 1)
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    for name in ("host", "gpu", "gpuclaim"):
        response = client.get(reverse(f"admin:hosts_{name}_changelist"))
        assert response.status_code == 200 and "host-a" in response.content.decode()
    assert client.get(reverse("admin:hosts_host_change", args=[host.pk])).status_code == 200


def test_the_hosts_page_says_which_hosts_are_live_stale_or_lost(client, user, settings):
    from datetime import timedelta

    from django.utils import timezone

    from lab.hosts.views import host_state

    settings.HOST_LOST_S = 600.0
    now = timezone.now()
    assert host_state(None, now) == "never"
    assert host_state(now - timedelta(seconds=5), now) == "live"
    assert host_state(now - timedelta(seconds=300), now) == "stale"
    assert host_state(now - timedelta(seconds=601), now) == "lost"
    Host.objects.create(name="fresh", queue="host.fresh", last_seen=now)
    Host.objects.create(name="gone", queue="host.gone", last_seen=now - timedelta(hours=2))
    client.force_login(user)
    html = client.get(reverse("hosts")).content.decode()
    fresh = html[html.index('id="host-fresh"') :][:900]
    gone = html[html.index('id="host-gone"') :][:900]
    assert ">live<" in fresh and ">lost<" in gone and "restart its worker" in gone
