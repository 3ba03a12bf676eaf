"""A fidelity set's journal: each real run kept on disk the moment it finishes.

A fidelity set takes minutes to tens of minutes of real runs (28 configurations x 3 runs: about
10 minutes here). Before the journal, a configuration whose runs failed twice, an error in
``fidelity``'s own process or Ctrl-C lost every run made so far. Now ``fidelity`` appends each
real run to the journal as it finishes. ``fidelity --resume`` reads the journal back and runs
only what it lacks.

**Format.** JSON lines, one object per line:

- a header: ``{"fidelity_journal": VERSION, "label": ..., "calibration": ...,
  "profiles": ...}``, fingerprints of the calibration's file and of its measured compute
  profiles' files when the set started (``fingerprint``, ``profiles_fingerprint``; journals
  from before them have none: ``calibrate --compute-only`` on the day of the calibration
  changes the profiles and may leave the file as it was);
- one ``{"run": {...}}`` per real run: its round, system, workload and nominal bandwidth, the
  real spec it ran (as ``fidelity.matched_specs`` wrote it), its metrics, its network's kind,
  its wall time and the failed attempts before it;
- one ``{"failed": {...}}`` per configuration whose run failed twice, stopping the set: its
  round, system, workload, bandwidth and the two attempts' errors (the resumed set's row
  lists them among its ``failed_attempts``);
- one ``{"drift": {...}, "stage": ...}`` per compute check: the whole ``compute_drift``
  mapping after the check, the stage ``before``, ``between-<round>`` or ``after``;
- one ``{"transport": {...}, "stage": ...}`` per transport check (PS sets): the whole
  ``fidelity_transport.TransportChecks`` mapping after the check, its stages named as the
  compute check's;
- at most one ``{"interference": {...}}`` (all-reduce sets): the interference check made
  before the real runs (``fidelity_interference.InterferenceChecks``).

Each line is flushed and fsynced before ``fidelity`` goes on. A crash while writing leaves at
most a torn last line; reading ignores it, and the next append overwrites it.

**What a resumed set reuses.** A run is reused when its round, system, workload, bandwidth and
real spec all match one the set would make. The real spec holds the iterations, workers,
threads and communication priority, so a journal from another calibration's layout is not
mixed in. The twins are simulated again from the current calibration, so a resumed set can
also rescore a finished set's real runs with a changed simulator without running them again,
or with a calibration measured again since: ``Journal.calibration_changed`` says so, and the
report with it.
The compute checks' stages are reused only when the journal's cover the same models, the
transport checks' and the interference check only when they cover the same networks. A set
with other systems, models or bandwidths reuses the runs it shares with the journal and
makes the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .spec import SpecError

VERSION = 1


def default_path(
    label: str,
    systems: Sequence[str],
    models: Sequence[str],
    bandwidths: Sequence[float | None],
    ps_transport: str = "blocking",
    added_latency_us: float = 0.0,
) -> Path:
    """Where ``fidelity`` keeps the journal of a set against calibration ``label``:
    ``$LAB_RESULTS_DIR/fidelity/<label>-<set>.journal.jsonl`` (``results/`` by default), where
    ``<set>`` is 8 hex digits of the systems, models and bandwidths (and the PS transport,
    where it is not the blocking one, and the added latency, where there is one). One journal
    per set, so the all-reduce and the PS sets of one calibration keep theirs side by side,
    and the same command finds its own again."""
    root = Path(os.environ.get("LAB_RESULTS_DIR") or "results")
    which = json.dumps(
        [list(systems), list(models), [_gbps(b) for b in bandwidths]]
        + ([ps_transport] if ps_transport != "blocking" else [])
        + ([f"latency {added_latency_us:g}"] if added_latency_us else [])
    )
    digest = hashlib.sha256(which.encode()).hexdigest()[:8]
    return root / "fidelity" / f"{label}-{digest}.journal.jsonl"


def fingerprint(path: Path) -> str:
    """12 hex digits of the SHA-256 of a calibration file's bytes: a journal's record of which
    calibration its runs were made against ("" where there is no such file)."""
    path = Path(path)
    if not path.is_file():
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def profiles_fingerprint(paths: Sequence[Path]) -> str:
    """12 hex digits of the SHA-256 of measured profiles' files, each file's name and bytes in
    the order given (a missing one as missing): which compute a journal's runs were scored
    against ("" for no paths)."""
    if not paths:
        return ""
    digest = hashlib.sha256()
    for path in map(Path, paths):
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"missing")
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def _gbps(nominal: float | None) -> float | None:
    return None if nominal is None else float(nominal)


@dataclass
class KeptRun:
    """A real run read back from the journal. It has what ``fidelity`` reads of a real run's
    result: ``metrics`` and ``network.kind``."""

    metrics: dict[str, float]
    network: SimpleNamespace
    wall_s: float
    failures: list[str] = field(default_factory=list)
    # the model's step timed just before and just after it (``fidelity``'s per-run check;
    # None: not checked, or a check that failed)
    checks: list[float | None] | None = None


def as_journaled(value: Any) -> Any:
    """``value`` as the journal reads it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value))


def spec_difference(now: Any, then: Any, at: str = "") -> str:
    """The first field (dotted) where two specs differ, and its two values."""
    if isinstance(now, dict) and isinstance(then, dict):
        for key in sorted(set(now) | set(then), key=str):
            if now.get(key) != then.get(key):
                found = f"{at}.{key}" if at else str(key)
                return spec_difference(now.get(key), then.get(key), found)
    return f"{at or 'spec'}: {then!r} in the journal, {now!r} now"


def kept_as(path: Path) -> Path:
    """Where a new set at ``path`` keeps the journal there: the first of ``<path>.prev``,
    ``<path>.prev2``, ``<path>.prev3``, ... that does not exist (the sets in the order run)."""
    path = Path(path)
    candidate, n = path.with_name(path.name + ".prev"), 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.prev{n}")
    return candidate


def journal_label(path: Path) -> str:
    """The calibration a journal's runs were made against (its header's label); ``SpecError``
    naming the file where it is missing or not a journal."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            header = json.loads(fh.readline() or b"null")
    except OSError as err:
        raise SpecError("JOURNAL", f"{path}: cannot be read ({err.strerror})") from None
    except ValueError:
        header = None
    if (
        not isinstance(header, dict)
        or header.get("fidelity_journal") != VERSION
        or not isinstance(header.get("label"), str)
    ):
        raise SpecError(
            "JOURNAL",
            f"{path} is not a fidelity journal (version {VERSION}): give the --journal files "
            "of fidelity sets",
        )
    return header["label"]


def _key(round_: int, system: str, model: str, nominal: float | None) -> tuple:
    return (round_, system, model, _gbps(nominal))


class Journal:
    """The journal at ``path`` for a set against calibration ``label``. ``resume``: read the
    runs and checks it holds (``SpecError`` naming ``--resume`` when there is none, or when it
    is another calibration's); otherwise start a new one. An existing file is kept as
    ``<path>.prev`` (``kept_as``: ``.prev2``, ``.prev3``, ... where that is taken), so one set
    started by mistake without ``--resume`` loses nothing, and the sets run one after another
    with the same command are all kept for ``fidelity-pool``.
    ``read_only`` (with ``resume``): read it without cutting a torn last line off, as of a
    set that may still be running (``fidelity_pool``); such a journal is not appended to.
    ``any_label`` (with ``read_only``): read a journal of another calibration than ``label``
    too (``fidelity --rescore``: its runs scored against ``label``'s twins); ``made_with``
    is the label its runs were made against, and ``calibration_changed`` stays False."""

    def __init__(
        self,
        path: Path,
        label: str,
        resume: bool,
        calibration: str = "",
        profiles: str = "",
        read_only: bool = False,
        any_label: bool = False,
    ) -> None:
        self.path = Path(path)
        self.label = label
        self.calibration = calibration  # the calibration's fingerprint now ("": not known)
        self.profiles = profiles  # its measured profiles' (``profiles_fingerprint``)
        # resumed: the journal's runs were made against another version of the calibration
        # (False where either fingerprint is unknown)
        self.calibration_changed = False
        # read back: the header's fingerprint of the calibration file ("": none kept)
        self.made_against = ""
        self._runs: dict[tuple, tuple[dict[str, Any], KeptRun]] = {}
        self._stages: dict[str, dict[str, Any]] = {}
        self._transport: dict[str, dict[str, Any]] = {}
        self._interference: dict[str, Any] | None = None
        self._failed: dict[tuple, list[str]] = {}
        self.reused = 0
        if read_only and not resume:
            raise ValueError("a journal is read read-only only to resume from it")
        if any_label and not read_only:
            raise ValueError("a journal of another calibration is only read, never appended to")
        self.read_only = read_only
        self.any_label = any_label
        self.made_with = label  # read back: the calibration its runs were made against
        if resume:
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                self.path.replace(kept_as(self.path))
            self._append({"fidelity_journal": VERSION, "label": label,
                          "calibration": calibration, "profiles": profiles})  # fmt: skip

    @property
    def runs(self) -> int:
        """How many real runs the journal holds."""
        return len(self._runs)

    def _read(self) -> None:
        if not self.path.is_file():
            raise SpecError(
                "--resume",
                f"no journal at {self.path} to go on from (each set of systems, models and "
                "bandwidths has its own: give the same ones as the set that stopped, or its "
                "--journal), or run without --resume to start the set",
            )
        data = self.path.read_bytes()
        good = 0  # bytes up to the end of the last complete line
        lines = []
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break  # a torn last line: the process stopped while writing it
            lines.append(raw)
            good += len(raw)
        if not lines:
            raise SpecError("--resume", f"{self.path} holds no journal: run without --resume")
        for number, raw in enumerate(lines, start=1):
            try:
                entry = json.loads(raw)
                if number == 1:
                    self._check_header(entry)
                else:
                    self._take(entry)
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                if isinstance(err, SpecError):
                    raise
                advice = (
                    "leave it out, or mend that line"
                    if self.read_only
                    else "give another --journal, or run without --resume"
                )
                raise SpecError(
                    "--resume",
                    f"{self.path} line {number} is not a journal entry ({err!r}): {advice}",
                ) from None
        if good < len(data) and not self.read_only:  # the next append on a clean line
            with self.path.open("r+b") as fh:
                fh.truncate(good)

    def _take(self, entry: dict[str, Any]) -> None:
        """One line after the header (``KeyError``/``TypeError`` where it is not an entry)."""
        if "run" in entry:
            run = entry["run"]
            key = _key(run["round"], run["system"], run["workload"], run["bandwidth_gbps"])
            kept = KeptRun(
                metrics=dict(run["metrics"]),
                network=SimpleNamespace(kind=run["network"]),
                wall_s=float(run["wall_s"]),
                failures=list(run.get("failures", [])),
                checks=run.get("checks"),
            )
            self._runs[key] = (run["spec"], kept)
        elif "failed" in entry:
            bad = entry["failed"]
            key = _key(bad["round"], bad["system"], bad["workload"], bad["bandwidth_gbps"])
            self._failed.setdefault(key, []).extend(bad["attempts"])
        elif "drift" in entry:
            self._stages[str(entry["stage"])] = entry["drift"]
        elif "transport" in entry:
            self._transport[str(entry["stage"])] = entry["transport"]
        elif "interference" in entry:
            self._interference = entry["interference"]
        else:
            raise KeyError("run, failed, drift, transport or interference")

    def _check_header(self, entry: Any) -> None:
        if not isinstance(entry, dict) or entry.get("fidelity_journal") != VERSION:
            raise SpecError(
                "--resume",
                f"{self.path} is not a fidelity journal (version {VERSION}): run without --resume",
            )
        if self.any_label and isinstance(entry.get("label"), str):
            self.made_with = entry["label"]
        if entry.get("label") != self.label and not self.any_label:
            raise SpecError(
                "--label",
                f"the journal at {self.path} is of calibration '{entry.get('label')}', not "
                f"'{self.label}': pass --label {entry.get('label')} or run without --resume",
            )
        then = entry.get("calibration") or ""
        self.made_against = then  # the calibration file's fingerprint then ("": not kept)
        profiles = entry.get("profiles") or ""  # journals from before it: the file's alone
        self.calibration_changed = self.made_with == self.label and bool(
            (then and self.calibration and then != self.calibration)
            or (profiles and self.profiles and profiles != self.profiles)
        )

    def _append(self, entry: dict[str, Any]) -> None:
        if self.read_only:
            raise RuntimeError(f"{self.path} was read read-only: not appended to")
        line = json.dumps(entry) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def runs_by_config(self) -> dict[tuple, list[tuple[dict[str, Any], KeptRun]]]:
        """Every real run the journal holds, per configuration ``(system, model, nominal
        Gbit/s or None)`` in the order the set made them (its first round's order), each
        with the real spec it ran: their rounds' order within a configuration."""
        found: dict[tuple, list[tuple[int, dict[str, Any], KeptRun]]] = {}
        for (round_, system, model, nominal), (spec, kept) in self._runs.items():
            found.setdefault((system, model, nominal), []).append((round_, spec, kept))
        return {
            config: [(spec, kept) for _, spec, kept in sorted(runs, key=lambda r: r[0])]
            for config, runs in found.items()
        }

    def kept(
        self, round_: int, system: str, model: str, nominal: float | None, spec: dict[str, Any]
    ) -> KeptRun | None:
        """The journal's run of this configuration in this round, made with ``spec`` (None:
        none, or one made with another real spec)."""
        found = self._runs.get(_key(round_, system, model, nominal))
        if found is None or found[0] != as_journaled(spec):
            return None
        self.reused += 1
        return found[1]

    def other_spec(
        self, round_: int, system: str, model: str, nominal: float | None, spec: dict[str, Any]
    ) -> str | None:
        """Where the journal's run of this configuration in this round was made with another
        real spec than ``spec``: the first field that differs (``spec_difference``); None
        where it has no such run."""
        found = self._runs.get(_key(round_, system, model, nominal))
        if found is None or found[0] == as_journaled(spec):
            return None
        return spec_difference(as_journaled(spec), found[0])

    def add_run(
        self,
        round_: int,
        system: str,
        model: str,
        nominal: float | None,
        spec: dict[str, Any],
        result: Any,
        wall_s: float,
        failures: list[str],
        checks: list[float | None] | None = None,
    ) -> None:
        """Keep a real run that just finished (``result``: its metrics and network kind;
        ``checks``: its model's step timed just before and after it, where taken)."""
        run = {
            "round": round_,
            "system": system,
            "workload": model,
            "bandwidth_gbps": nominal,
            "spec": spec,
            "metrics": dict(result.metrics),
            "network": result.network.kind,
            "health": getattr(result.network, "health", None),  # the testbed's counts
            "wall_s": wall_s,
            "failures": list(failures),
        }
        if checks is not None:
            run["checks"] = list(checks)
        self._append({"run": run})
        kept = KeptRun(
            dict(result.metrics), SimpleNamespace(kind=result.network.kind), wall_s,
            checks=None if checks is None else list(checks),
        )  # fmt: skip
        self._runs[_key(round_, system, model, nominal)] = (as_journaled(spec), kept)

    def add_failed(
        self, round_: int, system: str, model: str, nominal: float | None, attempts: list[str]
    ) -> None:
        """Keep the errors of a configuration's run that failed twice (the set stops)."""
        failed = {"round": round_, "system": system, "workload": model, "bandwidth_gbps": nominal}
        self._append({"failed": {**failed, "attempts": list(attempts)}})
        self._failed.setdefault(_key(round_, system, model, nominal), []).extend(attempts)

    def failed(self, round_: int, system: str, model: str, nominal: float | None) -> list[str]:
        """The errors the journal holds of this configuration's failed tries in this round,
        from sittings that stopped there."""
        return list(self._failed.get(_key(round_, system, model, nominal), []))

    def stage(self, name: str, models: tuple[str, ...]) -> dict[str, Any] | None:
        """The compute checks' ``compute_drift`` as it stood after stage ``name``, where the
        journal has that stage for exactly ``models`` (None otherwise)."""
        return _covering(self._stages.get(name), models)

    def add_stage(self, name: str, drift: dict[str, Any]) -> None:
        """Keep the compute checks' ``compute_drift`` after stage ``name``."""
        self._append({"drift": drift, "stage": name})
        self._stages[name] = as_journaled(drift)

    def transport_stage(self, name: str, networks: Sequence[str]) -> dict[str, Any] | None:
        """The transport checks as they stood after stage ``name``, where the journal has that
        stage for exactly ``networks`` (``fidelity_transport.network_key``s; None otherwise)."""
        return _covering(self._transport.get(name), networks)

    def add_transport_stage(self, name: str, checks: dict[str, Any]) -> None:
        """Keep the transport checks after stage ``name``."""
        self._append({"stage": name, "transport": checks})
        self._transport[name] = as_journaled(checks)

    def interference(self, networks: Sequence[str]) -> dict[str, Any] | None:
        """The interference check (``fidelity_interference``), where the journal has one of
        exactly ``networks`` (its ``network_key``s; None otherwise)."""
        return _covering(self._interference, networks)

    def add_interference(self, checks: dict[str, Any]) -> None:
        """Keep the interference check (made before the real runs)."""
        self._append({"interference": checks})
        self._interference = as_journaled(checks)


def _covering(kept: dict[str, Any] | None, keys: Sequence[str]) -> dict[str, Any] | None:
    """A stage's checks as the journal holds them (a copy), where they cover exactly
    ``keys``; None otherwise."""
    if kept is None or set(kept) != set(keys):
        return None
    return as_journaled(kept)
