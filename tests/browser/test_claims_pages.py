"""The Claims and Nightly pages in a real browser: check a claim and watch its verdict and
figure appear without a reload; edit the nightly schedule; start a night by hand and find its
history plot."""

from __future__ import annotations

import pytest

from tests.browser.conftest import login

pytestmark = pytest.mark.browser


def test_a_member_checks_a_claim_and_sees_verdict_figure_and_runs(page, portal):
    login(page, portal)
    page.click("nav >> text=Claims")
    assert "Verdict rule" in page.locator("#verdict-rule").inner_text()
    row = page.locator("tr#comm-claim")
    assert "10.0%" in row.locator(".claimed").inner_text()
    assert "not a sim claim" in page.locator("tr#real-only .result.sim").inner_text()
    row.locator(".result.sim button", has_text="Check now").click()
    assert page.locator(".message").inner_text().startswith("Queued 4 runs to check comm-claim")
    page.evaluate("window.__noReload = true")
    verdict = page.locator("tr#comm-claim .result.sim .verdict")
    verdict.wait_for(state="visible", timeout=120_000)
    assert verdict.inner_text() in ("reproduced", "partial", "not-reproduced")
    # The figure is drawn after the verdict is recorded (the worker's first matplotlib import
    # can take tens of seconds on a loaded 2-core machine: once over 30 s in CI).
    figure = page.locator("tr#comm-claim img.claim-figure")
    figure.wait_for(state="visible", timeout=120_000)
    page.wait_for_function(
        "(() => { const i = document.querySelector('tr#comm-claim img.claim-figure');"
        " return i && i.complete && i.naturalWidth > 0; })()"
    )
    assert page.evaluate("window.__noReload === true"), "the verdict must appear without a reload"
    assert "conditions" in page.locator("tr#comm-claim + tr.conditions").inner_text().lower()
    page.locator("tr#comm-claim a.runs-link").click()
    page.wait_for_url("**/experiments/*/")
    assert page.locator("tr[id^=run-] .state.succeeded").count() == 4


def test_staff_edit_the_schedule_and_a_night_ends_with_a_history_plot(page, portal):
    login(page, portal)
    page.click("nav >> text=Nightly")
    # seeded from LAB_NIGHTLY_CRON (the test stacks': twelve hours away) by the first migrate
    assert page.locator("#schedule-cron").inner_text() == portal.env["LAB_NIGHTLY_CRON"]
    page.click("text=Edit the schedule")
    page.fill("#id_cron", "0 99 * * *")
    page.click("text=Save schedule")
    assert "Schedule not changed: cron hour" in page.locator(".message.error").inner_text()
    page.click("text=Edit the schedule")
    page.fill("#id_cron", "15 3 * * 1-5")
    page.uncheck("#id_enabled")
    page.check("input[name=claims][value=comm-claim]")
    page.click("text=Save schedule")
    assert page.locator("#schedule-cron").inner_text() == "15 3 * * 1-5"
    assert page.locator("#schedule-state").inner_text() == "disabled"
    page.click("#run-now")
    page.wait_for_url("**/nightly/*/")
    page.wait_for_function(
        "document.getElementById('night-state').textContent === 'done'", timeout=150_000
    )
    assert page.locator("#check-comm-claim .verdict").count() == 1
    page.click("nav >> text=Nightly")
    history = page.locator("img.history").first
    history.wait_for(state="visible")
    page.wait_for_function(
        "[...document.querySelectorAll('img.history')].every(i => i.complete && i.naturalWidth > 0)"
    )
    assert page.locator("tr[id^=night-] .state", has_text="done").count() >= 1
