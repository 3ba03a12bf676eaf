"""``fidelity-pool``: the real runs of several fidelity sets of one calibration, scored together.

Why. On the lab's shared machine a configuration's real runs spread 10-25 % of their median
within a set (``docs/fidelity-history.md``). With three runs a configuration, a set's MAPE
moves by several points from one draw of the runs to the next, and its range over such draws
(``fidelity.mape_interval``) often spans the 10 % target: "not resolved". Sets made against
the same calibration measure the same configurations with the same twins; pooling their runs
gives each configuration the median of more runs, a steadier estimate of its usual time.

What. ``pool`` reads each set's journal (``fidelity_journal``, read only: a set still running
may be pooled as far as it has gone) and requires:

- one calibration: every journal's label the same, and its fingerprints (the calibration's
  file, its compute profiles) those of the calibration as it is now, as the twins are
  simulated from it now (a journal made against an earlier version: ``fidelity --resume``
  rescores it alone);
- for every run of a configuration, the real spec ``fidelity`` makes now from the calibration
  for the journals' iterations (the workers, threads and communication priority the twin
  models).

The configurations every journal holds are pooled (the others are listed as ``left_out``).
Each configuration's twin is simulated once; the row scores it against the median of all its
pooled runs (``fidelity``'s row, its ``real_runs_s`` every run), so the MAPE is ``fidelity``'s,
over more runs. With each run's compute checks in every journal (``--check-each-run``),
``mape_with``'s ``run_checked`` too.

The range. A set's runs are not independent draws: they share the machine's state of that
sitting (a slow spell, the transport's cost of the day), and sets differ by more than their
runs do. Pooled runs treated as one set's (``fidelity.mape_interval``) would give too narrow
a range. The pooled report's ``mape_ci_pct`` and verdict are therefore a two-stage bootstrap
(``sets_interval``): each resample draws the sets with replacement, then each drawn set's runs
with replacement, and scores the pooled medians; so the range counts how the sets differ as
well as how their runs spread. The runs-alone range is kept beside it
(``pool``'s ``mape_ci_runs_pct``).

Beside the pooled score, each set's own with the same twins (what ``fidelity --resume`` of its
journal reports as its headline), so a pooled score is read with the sets it came from.

Which sets go in is the user's choice: pool every set of a calibration, not the good ones
(the report lists each set's own score). Nothing here runs anything real or fits anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import fidelity, registry, resample
from .fidelity import network_name
from .fidelity_journal import Journal, KeptRun, as_journaled, journal_label, spec_difference
from .spec import SpecError, validate

FIELD = "JOURNAL"  # the command line's name for the journals, in its errors

Config = tuple[str, str, float | None]  # (system, model, nominal Gbit/s or None: loopback)


def _books(paths: Sequence[Path]) -> tuple[str, dict[str, Any], list[Journal]]:
    """The journals' calibration, its testbed and the journals, read; ``SpecError`` naming
    ``JOURNAL`` and the file where they cannot be pooled."""
    if len(paths) < 2:
        raise SpecError(FIELD, "give two or more fidelity sets' journals to pool")
    seen: dict[Path, Path] = {}
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise SpecError(FIELD, f"{path} is given twice (as {seen[resolved]}): each set once")
        seen[resolved] = Path(path)
    labels = [journal_label(path) for path in paths]
    label = labels[0]
    for path, other in zip(paths, labels, strict=True):
        if other != label:
            raise SpecError(
                FIELD,
                f"{path} is a set of calibration '{other}', {paths[0]} of '{label}': pool the "
                "sets of one calibration (each calibration's twins differ)",
            )
    testbed = fidelity.load_testbed(label)
    prints = fidelity.calibration_prints(label, testbed)
    books = []
    for path in paths:
        try:
            book = Journal(Path(path), label, True, *prints, read_only=True)
        except SpecError as err:
            raise SpecError(FIELD, err.message) from None
        if prints[0] and not book.made_against:
            raise SpecError(
                FIELD,
                f"{path}: its header keeps no fingerprint of the calibration its runs were made "
                "against (a journal from before fingerprints were kept), so it cannot be "
                f"checked against the calibration '{label}' there now: leave it out "
                "(fidelity --resume --journal scores it alone)",
            )
        if book.calibration_changed:
            raise SpecError(
                FIELD,
                f"{path}: its runs were made against another version of the calibration "
                f"'{label}' than the one there now, whose twins would score them: pool the "
                "sets made against one version (fidelity --resume --journal scores this one "
                "alone)",
            )
        books.append(book)
    return label, testbed, books


def _iterations(config: Config, held: list[tuple[Path, list[tuple[dict, KeptRun]]]]) -> int:
    """The measured iterations of a configuration's runs in every journal (``SpecError``
    where they differ: another length is another measurement)."""
    found = {(path, int(spec["iterations"])) for path, runs in held for spec, _ in runs}
    lengths = sorted({n for _, n in found})
    if len(lengths) > 1:
        which = ", ".join(f"{path}: {n}" for path, n in sorted(found, key=str))
        system, model, nominal = config
        raise SpecError(
            FIELD,
            f"the {system}/{model}/{network_name(nominal)} runs measured different iterations "
            f"({which}): pool sets run with the same --iterations",
        )
    return lengths[0]


def sets_interval(
    rows: list[tuple[float, list[list[float]]]],
    ci: float = fidelity.MAPE_CI,
    resamples: int = fidelity.MAPE_RESAMPLES,
    seed: int = fidelity.MAPE_CI_SEED,
) -> tuple[float, float] | None:
    """The range the pooled MAPE would take with other draws of the sets and of their runs:
    a two-stage percentile bootstrap (the ``ci`` central share of ``resamples``). ``rows``:
    per configuration, its prediction and its runs' times in each set (the same sets, in the
    same order, for every configuration). Each resample draws as many sets as there are,
    with replacement (one draw for all configurations: a set is one sitting of the machine
    for all of them), then each drawn set's runs of a configuration with replacement, as many
    as it had, and scores the prediction against the median of them all, as the MAPE does.
    None with fewer than two sets. It leans wide: drawing the runs again within each drawn
    set counts their spread a second time over the sets' own (a known property of the
    two-stage bootstrap), so a range under the target is a safe "met"; and with two sets it
    spans the gap between their scores."""
    if not 0.0 < ci < 1.0 or resamples < 1:
        raise ValueError(f"ci must be in (0, 1) and resamples positive (got {ci}, {resamples})")
    if not rows or len(rows[0][1]) < 2:
        return None
    count = len(rows[0][1])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, count, (resamples, count))  # the sets each resample draws
    total = np.zeros(resamples)
    for predicted, sets in rows:
        if len(sets) != count or any(not runs for runs in sets):
            raise ValueError("every configuration needs runs in each of the same sets")
        sizes = np.array([len(runs) for runs in sets])
        table = np.full((count, sizes.max()), np.nan)
        for k, runs in enumerate(sets):
            table[k, : len(runs)] = runs
        drawn = sizes[picks][..., None]  # each drawn set's number of runs
        slots = np.arange(sizes.max())
        which = np.floor(rng.random((resamples, count, sizes.max())) * drawn).astype(int)
        draws = np.where(slots < drawn, table[picks[..., None], which], np.nan)
        medians = np.nanmedian(draws.reshape(resamples, -1), axis=1)
        total += 100.0 * np.abs(predicted - medians) / medians
    return resample.interval(total / len(rows), ci)


def pool(
    paths: Sequence[Path],
    latency: str = fidelity.DEFAULT_LATENCY,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The real runs of the fidelity sets whose journals are ``paths``, pooled per
    configuration and scored against the twins of their calibration as it is now (see the
    module docstring): ``fidelity.report``'s report of the pooled rows, with ``pool``: the
    journals, each one's runs and own score with the same twins, and ``left_out`` (the
    configurations not in every journal). ``SpecError`` naming ``JOURNAL`` where they
    cannot be pooled."""
    say = progress or (lambda message: None)
    label, testbed, books = _books(paths)
    held = [book.runs_by_config() for book in books]
    every = [config for config in held[0] if all(config in h for h in held[1:])]
    left_out = sorted(
        {config for h in held for config in h} - set(every), key=lambda c: tuple(map(str, c))
    )
    if not every:
        raise SpecError(FIELD, "the journals share no configuration: nothing to pool")
    configs: list[dict[str, Any]] = []
    per_set: list[list[dict[str, Any]]] = [[] for _ in books]
    checked = True  # every run of every journal has its checks (``--check-each-run``)
    transports: set[str] = set()  # the PS configurations' (reported as ``fidelity``'s are)
    added_latencies: set[float] = set()
    for n, config in enumerate(every, start=1):
        system, model, nominal = config
        mine = [(book.path, h[config]) for book, h in zip(books, held, strict=True)]
        iterations = _iterations(config, mine)
        # the PS transport and added latency the first run had (every run must match the
        # real spec below)
        first = next(spec for _, held_runs in mine for spec, _ in held_runs)
        transport = (first.get("real") or {}).get("ps_transport", "blocking")
        added = float((first.get("cluster") or {}).get("latency_us", 0.0))
        if registry.get(system).arena == "ps":
            transports.add(transport)
        added_latencies.add(added)
        real_raw, sim_raw = fidelity.matched_specs(
            system, model, nominal, testbed, iterations, latency, ps_transport=transport,
            added_latency_us=added,
        )  # fmt: skip
        expected = as_journaled(real_raw)
        for path, runs in mine:
            for spec, _ in runs:
                if spec != expected:
                    raise SpecError(
                        FIELD,
                        f"{path}: its {system}/{model}/{network_name(nominal)} runs were made with "
                        f"another real spec than the calibration gives now "
                        f"({spec_difference(expected, spec)}): pool sets made with the "
                        "same layout",
                    )
        real_spec, sim_spec = validate(real_raw), validate(sim_raw)
        twin = fidelity._twin(real_spec, sim_spec)
        runs = [kept for _, held_runs in mine for _, kept in held_runs]
        row = fidelity._row(system, model, nominal, runs, twin)
        row["sets_runs"] = [len(held_runs) for _, held_runs in mine]
        checks = [kept.checks for kept in runs]
        if checked and all(c and len(c) == 2 and c[0] and c[1] for c in checks):
            step = fidelity.calibrated_step(model, label)
            if step is not None:
                fidelity._run_checked(row, real_spec, sim_spec, checks, step[0])
        checked = checked and "sim_run_checked_s" in row
        configs.append(row)
        for k, (_, held_runs) in enumerate(mine):
            alone = [kept for _, kept in held_runs]
            per_set[k].append(fidelity._row(system, model, nominal, alone, twin))
        say(
            f"{n}/{len(every)} {system}/{model}/{network_name(nominal)}: {len(runs)} runs, real "
            f"{row['real_iteration_s'] * 1e3:.1f} ms, sim {row['sim_iteration_s'] * 1e3:.1f} ms "
            f"({row['ape_pct']:.1f}%)"
        )
    with_ = {"run_checked": fidelity._mape_of(configs, "sim_run_checked_s")} if checked else {}
    result = fidelity.report(
        configs,
        label,
        latency,
        comm_priority=testbed.get("comm_priority", "normal"),
        mape_with=with_,
    )
    runs_alone = result["mape_ci_pct"]
    # what fidelity's own report says of its set: the PS transport, the added latency (one
    # of each: a set's runs share them, and pooled runs match their configuration's spec)
    if transports:
        (result["ps_transport"],) = transports
    if any(added_latencies):
        (result["added_latency_us"],) = added_latencies

    def by_sets(system: str | None) -> tuple[float, float] | None:
        return sets_interval(
            [
                (row["sim_iteration_s"], [r["real_runs_s"] for r in rows])
                for row, *rows in zip(configs, *per_set, strict=True)
                if system is None or row["system"] == system
            ]
        )

    interval = by_sets(None)
    result.update(
        mape_ci_pct=None if interval is None else list(interval),
        mape_ci_of="the sets and of their runs, two-stage",
        target_verdict=fidelity.target_verdict(result["mape_pct"], interval, len(configs)),
        per_system_mape_ci_pct={
            system: None if (one := by_sets(system)) is None else list(one)
            for system in result["per_system_mape_pct"]
        },
    )
    result["pool"] = {
        # the range over other draws of the pooled runs, as of one set's (too narrow where
        # the sets differ: the module docstring)
        "mape_ci_runs_pct": runs_alone,
        "sets": [
            {
                "journal": str(book.path),
                "runs": sum(len(r["real_runs_s"]) for r in rows),
                **fidelity.headline(rows),
            }  # fmt: skip
            for book, rows in zip(books, per_set, strict=True)
        ],
        "runs": sum(len(row["real_runs_s"]) for row in configs),
        "left_out": [{"system": s, "workload": m, "bandwidth_gbps": b} for s, m, b in left_out],
    }
    return result


def format_pool(result: dict[str, Any]) -> str:
    """The pooled report as text: ``fidelity``'s report of the pooled rows, then each set's
    own score beside the pooled one."""
    pooled = result["pool"]
    sets = pooled["sets"]
    lines = [
        f"{len(sets)} fidelity sets of calibration {result['label']} pooled: "
        f"{pooled['runs']} real runs, each configuration's median of all its runs against "
        "its twin simulated now",
        "",
        fidelity.format_report(result),
        "",
        "each set alone, against the same twins:",
    ]
    for one in sets:
        interval = one["mape_ci_pct"]
        lines.append(
            f"  {one['journal']}: {one['runs']} runs, MAPE {one['mape_pct']:.1f}%"
            + (" ({:.1f}-{:.1f}%)".format(*interval) if interval is not None else "")
            + f", {one['target_verdict']}"
            + (
                f"; runs spread a median {one['real_spread_pct']:.1f}%"
                if one["real_spread_pct"] is not None
                else ""
            )
        )
    interval, runs_alone = result["mape_ci_pct"], pooled["mape_ci_runs_pct"]
    lines.append(
        f"  pooled: {pooled['runs']} runs, MAPE {result['mape_pct']:.1f}%"
        + (" ({:.1f}-{:.1f}%".format(*interval) if interval is not None else "")
        + (
            ", {:.1f}-{:.1f}% over other draws of the runs alone)".format(*runs_alone)
            if interval is not None and runs_alone is not None
            else ")"
            if interval is not None
            else ""
        )
        + f", {result['target_verdict']}"
    )
    if pooled["left_out"]:
        names = ", ".join(
            f"{c['system']}/{c['workload']}/{network_name(c['bandwidth_gbps'])}"
            for c in pooled["left_out"]
        )
        lines.append(f"not in every journal, left out: {names}")
    return "\n".join(lines)
