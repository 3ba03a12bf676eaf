"""A night started by beat, end to end on the embedded broker: the nightly schedule (a
django-celery-beat crontab entry, here every minute) fires, the worker runs the claims' and the
nightly experiment's runs, settle judges the claims, records the history and posts the report
to a webhook."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
import yaml

from tests.integration.test_claims_stack import LEDGER

pytestmark = pytest.mark.integration

READ_NIGHTS = """
import json
from lab.reports.models import NightlyRun
print(json.dumps([
    {"pk": n.pk, "state": n.state, "trigger": n.trigger, "summary": n.summary,
     "notified": n.notified, "series": sorted(n.points.values_list("series", flat=True)),
     "experiments": [e.rerun_of_id for e in n.experiments.all()]}
    for n in NightlyRun.objects.order_by("pk")
]))
"""


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_beat_starts_a_night_that_ends_with_verdicts_history_and_a_webhook(fresh_stack, tmp_path):
    hook = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text(yaml.safe_dump([LEDGER[0], LEDGER[2]]))  # one sim claim, one real-only
    stack = fresh_stack(
        LAB_CLAIMS_LEDGER=str(ledger),
        # The beat entry starts far away and is set to every minute once the experiment is
        # marked nightly: no night (the night of the next 10 minutes) can start before that.
        LAB_NIGHTLY_CRON="0 0 1 1 *",
        LAB_NIGHTLY_NOTIFY="always",
        LAB_NIGHTLY_WEBHOOK=f"http://127.0.0.1:{hook.server_port}/night",
        LAB_SETTLE_INTERVAL_S="2",
    )
    try:
        # An experiment marked nightly, defined through the API like any other.
        status, created = stack.api(
            "POST",
            "/api/experiments/",
            {"name": "tracked", "system": "bytescheduler", "baselines": ["wfbp"],
             "workloads": ["resnet50-debug"], "seeds": [0], "iterations": 3,
             "cluster": {"workers": 2, "bandwidth_gbps": 1.0}},
        )  # fmt: skip
        assert status == 201, created
        source = created["id"]
        stack.wait_finished(source)
        stack.manage(
            "shell", "-c",
            f"from lab.experiments.models import Experiment; "
            f"Experiment.objects.filter(pk={source}).update(nightly=True); "
            f"from lab.reports import nightly; "
            f"nightly.update_schedule('* * * * *', True, None)",
        )  # fmt: skip
        deadline = time.monotonic() + 240
        nights: list[dict] = []
        while time.monotonic() < deadline:
            nights = json.loads(stack.manage("shell", "-v", "0", "-c", READ_NIGHTS))
            # ``notified`` is saved after the webhook answered: wait for both, or the night
            # read before the POST arrived may still show ``{}``.
            if nights and nights[0]["state"] == "done" and nights[0]["notified"]:
                break
            time.sleep(3)
        else:
            pytest.fail(f"no finished night in time: {nights}\n{stack.log('beat')[-3000:]}")
        night = nights[0]
        assert night["trigger"] == "beat"
        verdicts = night["summary"]["verdicts"]
        assert set(verdicts) == {"comm-claim", "real-only"}
        assert verdicts["comm-claim"] != "not-run" and verdicts["real-only"] == "not-run"
        assert night["experiments"] == [source]
        assert "claim:comm-claim:sim" in night["series"]
        assert any(s.startswith(f"exp:{source}:bytescheduler:") for s in night["series"])
        assert night["notified"] == {"webhook": 204}
        report = _Hook.received[0]
        assert report["night"] == night["pk"] and report["verdicts"] == verdicts
    finally:
        stack.manage(
            "shell", "-c",
            "from django_celery_beat.models import PeriodicTask; "
            "PeriodicTask.objects.filter(name='nightly reproducibility').update(enabled=False)",
        )  # fmt: skip
        hook.shutdown()
