"""A lab member in a real browser (Playwright driving Debian's Chromium): log in, define an
experiment through the form, watch it run without reloading, and find the plot."""

from __future__ import annotations

import zipfile

import pytest

from tests.browser.conftest import login

pytestmark = pytest.mark.browser


def test_a_member_creates_an_experiment_and_sees_its_plot(page, portal):
    login(page, portal)
    page.click("text=New experiment")
    page.fill("#id_name", "browser run")
    page.select_option("#id_system", "psld")
    assert page.is_visible("#ps-fields")  # PS cluster fields for a PS system only
    page.select_option("#id_system", "pace")
    assert not page.is_visible("#ps-fields")
    # Baselines of the system's arena are preselected by the page; keep one.
    for baseline in ("wfbp", "ddp", "horovod", "bytescheduler", "dear"):
        assert page.is_checked(f"input[name=baselines][value={baseline}]"), baseline
    assert not page.is_checked("input[name=baselines][value=byteps]")  # another arena
    assert page.is_disabled("input[name=baselines][value=pace]")
    for baseline in ("ddp", "horovod", "bytescheduler", "dear"):
        page.uncheck(f"input[name=baselines][value={baseline}]")
    page.check("input[name=workloads][value=resnet50-debug]")
    page.fill("#id_seeds", "0, 1")
    page.fill("#id_iterations", "5")
    page.fill("#id_cluster_workers", "4")
    page.fill("#id_cluster_bandwidth_gbps", "1, 10")  # a sweep: every run at both
    page.click("text=Queue experiment")
    page.wait_for_url("**/experiments/*/")
    assert page.locator(".message").inner_text().startswith("Queued 8 runs")

    page.evaluate("window.__noReload = true")  # survives only if the page never reloads
    page.wait_for_function(
        "document.getElementById('experiment-status').textContent === 'succeeded'", timeout=120_000
    )
    plot = page.locator("img.plot").first
    plot.wait_for(state="visible", timeout=60_000)
    page.wait_for_function(
        "[...document.querySelectorAll('img.plot')].every(i => i.complete && i.naturalWidth > 0)"
    )
    assert page.evaluate("window.__noReload === true"), "status must refresh without a reload"
    assert page.locator("tr[id^=run-] .state.succeeded").count() == 8
    assert page.locator("tr[id^=run-]", has_text="4 workers, 10 Gbit/s").count() == 4
    assert page.locator("a", has_text="PDF").count() >= 1
    timeline = page.locator("img.plot[alt^='iteration timeline']")
    timeline.wait_for(state="visible", timeout=60_000)  # drawn after the comparisons
    assert timeline.count() == 1 and "pace, wfbp" in timeline.get_attribute("alt")

    # Export for paper: the bundle downloads, with the figures, their CSVs and regenerate.py.
    page.click("#export summary")
    page.select_option("#id_venue", "ieee-2col")
    page.fill("#id_note", "browser test: the tree may carry uncommitted test files")
    with page.expect_download() as download:
        page.click("#export-button")
    path = download.value.path()
    names = set(zipfile.ZipFile(path).namelist())
    assert {"regenerate.py", "table.tex", "figures/timeline.pdf", "data/timeline.csv"} <= names
    assert any(n.startswith("figures/speedup-iteration_time_s") for n in names)

    page.locator("tr[id^=run-] a", has_text="log").first.click()
    assert "iteration_time_s" in page.locator("pre.log").first.inner_text()


def test_a_member_queues_a_cluster_arena_experiment_on_a_generated_trace(page, portal):
    login(page, portal)
    page.goto(portal.url + "/experiments/new/")
    assert page.is_visible("#comm-fields") and not page.is_visible("#trace-fields")
    page.select_option("#id_system", "oasis")
    for part in ("#trace-fields", "#cluster-arena-fields"):
        assert page.is_visible(part), part
    for part in ("#comm-fields", "#ps-fields", "#id_workloads", "#id_iterations"):
        assert not page.is_visible(part), part
    assert page.is_checked("input[name=baselines][value=fifo]")
    assert page.is_disabled("input[name=baselines][value=wfbp]")  # another arena
    ticked = [b.get_attribute("value") for b in page.locator("input[name=baselines]:checked").all()]
    assert len(ticked) >= 5  # the cluster arena's baselines
    for baseline in ticked:
        if baseline != "fifo":
            page.uncheck(f"input[name=baselines][value={baseline}]")
    page.fill("#id_name", "cluster run")
    page.fill("#id_seeds", "0")
    page.fill("#id_trace_jobs", "0")
    page.fill("#id_trace_duration_scale", "0.1")
    page.fill("#id_cluster_arena_servers", "2")
    page.click("text=Queue experiment")
    # Shown again with the error next to the trace field, the cluster arena's parts still shown.
    assert "trace.jobs" in page.locator("#field-trace_jobs .error").inner_text()
    assert page.is_visible("#trace-fields") and not page.is_visible("#comm-fields")
    page.fill("#id_trace_jobs", "20")
    page.click("text=Queue experiment")
    page.wait_for_url("**/experiments/*/")
    assert page.locator(".message").inner_text().startswith("Queued 2 runs")
    page.wait_for_function(
        "document.getElementById('experiment-status').textContent === 'succeeded'", timeout=120_000
    )
    assert page.locator("tr[id^=run-]", has_text="philly-20").count() == 2


def test_a_member_trains_for_real_from_the_portal(page, portal):
    """Mode real: the page shows how the runs train only for it; the runs train for real (two
    ranks each, on loopback here), one at a time, and the page shows their loss and network."""
    login(page, portal)
    page.goto(portal.url + "/experiments/new/")
    page.select_option("#id_system", "wfbp")
    assert not page.is_visible("#real-fields")
    page.select_option("#id_mode", "real")
    assert page.is_visible("#real-fields")
    # each arena's own real fields: the lab engine's dispatch, the PS transport
    assert page.is_visible("#field-real_dispatch") and page.is_visible("#field-real_nodes")
    assert not page.is_visible("#field-real_ps_transport")
    page.select_option("#id_system", "ps-default")
    assert page.is_visible("#field-real_ps_transport")
    assert not page.is_visible("#field-real_dispatch") and not page.is_visible("#field-real_nodes")
    assert page.is_visible("#field-real_comm_priority")  # both arenas'
    page.select_option("#id_system", "wfbp")
    ticked = [b.get_attribute("value") for b in page.locator("input[name=baselines]:checked").all()]
    for baseline in ticked:
        if baseline != "ddp":
            page.uncheck(f"input[name=baselines][value={baseline}]")
    page.fill("#id_name", "real run")
    page.check("input[name=workloads][value=vgg16-debug]")
    page.fill("#id_seeds", "0")
    page.fill("#id_iterations", "5")
    page.fill("#id_cluster_workers", "2")
    page.fill("#id_cluster_bandwidth_gbps", "1")
    page.select_option("#id_real_network", "loopback")
    page.select_option("#id_real_dataset", "shapes")
    page.fill("#id_real_lr", "-1")
    page.click("text=Queue experiment")
    assert "real.lr" in page.locator("#field-real_lr .error").inner_text()
    assert page.is_visible("#real-fields")  # shown again with the error, mode real kept
    page.fill("#id_real_lr", "0.05")
    page.click("text=Queue experiment")
    page.wait_for_url("**/experiments/*/")
    assert page.locator(".message").inner_text().startswith("Queued 2 runs")
    assert page.is_visible("#figures-between-runs")  # figures wait for the real runs
    page.wait_for_function(
        "document.getElementById('experiment-status').textContent === 'succeeded'", timeout=180_000
    )
    assert page.locator("tr[id^=run-] .state.succeeded").count() == 2
    assert page.locator("th", has_text="final loss").count() == 1
    assert page.locator("tr[id^=run-]", has_text="loopback").count() == 2
    # Rendering competes with the worker for 2 cores: give it time.
    page.locator("img.plot").first.wait_for(state="visible", timeout=180_000)
    assert "loopback" in page.locator("details pre").first.text_content()  # the definition
    # beside the real runs the simulator's prediction of them, or why this machine's
    # calibrations do not cover them
    twins = page.locator("img.plot[alt^='real runs beside the simulator'], .twin-notes")
    twins.first.wait_for(state="visible", timeout=60_000)


def test_invalid_input_is_explained_next_to_the_field(page, portal):
    login(page, portal)
    page.goto(portal.url + "/experiments/new/")
    page.fill("#id_name", "bad one")
    page.check("input[name=workloads][value=resnet50-debug]")
    page.fill("#id_cluster_workers", "0")
    page.click("text=Queue experiment")
    error = page.locator("#field-cluster_workers .error")
    assert "cluster.workers" in error.inner_text()
    assert page.url.endswith("/experiments/new/")


def test_the_catalogue_lists_systems_with_papers(page, portal):
    login(page, portal)
    page.click("text=Catalogue")
    assert "SOSP 2019" in page.locator("#entry-bytescheduler").inner_text()
    assert "credit_bytes" in page.locator("#entry-bytescheduler").inner_text()
