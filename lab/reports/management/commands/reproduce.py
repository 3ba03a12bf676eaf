"""``python manage.py reproduce [CLAIM ...] [--all] --mode sim|real [--json]``.

Runs each claim's experiment through the normal queue (a Celery worker must be running, as
``make run`` starts one) and store, then prints one line per claim: a table, or with ``--json``
one JSON object per line with ``claim``, ``system``, ``claimed``, ``measured``, ``unit``,
``verdict`` and ``conditions`` (and ``other_cores`` where real runs were measured beside
other work on their host, which the table says too). Each check is also kept, and shown on
the Claims page.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.reports import claims as ledger
from lab.reports import nightly as nights
from lab.reports import reproduce
from lab.reports.models import ClaimCheck


class Command(BaseCommand):
    help = "Run the claims ledger's experiments and print claimed vs measured with a verdict."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("claims", nargs="*", metavar="CLAIM", help="claim ids (see --list)")
        parser.add_argument("--all", action="store_true", help="every claim in the ledger")
        parser.add_argument("--mode", choices=("sim", "real"), default="sim")
        parser.add_argument("--json", action="store_true", help="one JSON line per claim")
        parser.add_argument("--list", action="store_true", help="list the claims and exit")
        parser.add_argument("--timeout", type=float, default=3600.0,
                            help="seconds to wait for the runs (default 3600)")  # fmt: skip
        parser.add_argument("--ledger", default=None,
                            help="ledger file (default: LAB_CLAIMS_LEDGER)")  # fmt: skip

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            claims = ledger.load_ledger(opts["ledger"] or settings.CLAIMS_LEDGER)
        except ledger.LedgerError as err:
            raise CommandError(f"invalid ledger: {err}", returncode=2) from None
        by_id = {c.id: c for c in claims}
        if opts["list"]:
            for c in claims:
                self.stdout.write(f"{c.id:<28} {c.system:<18} {'/'.join(c.modes):<9} {c.claim}")
            return
        if opts["all"] == bool(opts["claims"]):
            raise CommandError("name claims or pass --all (not both); --list shows them",
                               returncode=2)  # fmt: skip
        unknown = [name for name in opts["claims"] if name not in by_id]
        if unknown:
            raise CommandError(
                f"unknown claim(s) {', '.join(unknown)}; known: {', '.join(by_id)}", returncode=2
            )
        chosen = claims if opts["all"] else [by_id[name] for name in opts["claims"]]
        mode = opts["mode"]
        checks = {c.id: nights.start_check(c, mode, user=reproduce.bot_user()) for c in chosen}
        queued = [ch.experiment for ch in checks.values() if ch.experiment is not None]
        if queued:
            n_runs = sum(e.runs.count() for e in queued)
            self.stderr.write(f"queued {len(queued)} experiment(s), {n_runs} runs "
                              f"(experiments {', '.join(str(e.pk) for e in queued)})")  # fmt: skip
            finished = reproduce.wait(queued, opts["timeout"], progress=self._progress)
            sys.stderr.write("\n")
            if not finished:
                raise CommandError(
                    f"the runs did not all end within {opts['timeout']:.0f} s; is a Celery "
                    "worker running (`make run` starts one)? The experiments stay queued, and "
                    "their verdicts appear on the Claims page when they end.",
                    returncode=1,
                )
        for claim in chosen:
            check = checks[claim.id]
            check.refresh_from_db()
            if check.state == ClaimCheck.PENDING:
                nights.judge_check(check)
            line = check.line
            if opts["json"]:
                self.stdout.write(json.dumps(line, sort_keys=True))
            else:
                measured = "-" if line["measured"] is None else f"{line['measured']:.3g}"
                beside = line.get("other_cores")  # real runs beside other work (the Claims page)
                caution = (
                    f"; its runs were measured beside other work on their host (up to "
                    f"{beside:.2f} cores): the measured value may be that work's, check again "
                    "on a quiet machine"
                    if beside
                    else ""
                )
                self.stdout.write(
                    f"{claim.id:<28} claimed {claim.claimed:>6g} {claim.unit:<2} measured "
                    f"{measured:>7} {claim.unit:<2} {line['verdict']:<15} {line['reason']}"
                    f"{caution}"
                )

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs")
        sys.stderr.flush()
