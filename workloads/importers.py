"""Importers for public cluster traces: read a trace file into a tuple of ``traces.Job``.

``load_trace(path, fmt)`` reads one of ``FORMATS`` (research/cluster.md §5, §4.1, §4.3):

- ``philly``: Microsoft Philly ``cluster_job_log`` (JSON list of jobs; msr-fiddle/philly-traces).
  Arrival = ``submitted_time``; GPUs = the GPUs listed in the first attempt's ``detail``;
  duration = first attempt's ``start_time`` to the last attempt's ``end_time`` (so it includes
  the gaps between attempts). A job without attempts or without those times is a bad record.
- ``helios``: SenseTime Helios ``cluster_log.csv`` (header row; S-Lab-System-Group/HeliosData:
  job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time, end_time,
  duration, queue; extra columns are ignored). Arrival = ``submit_time``; duration =
  ``end_time - start_time``; one worker per GPU with ``cpu_num / gpu_num`` cores each.
- ``pai``: Alibaba PAI ``pai_job_table.csv`` (path) with ``pai_task_table.csv`` from the same
  folder (alibaba/clusterdata ``cluster-trace-gpu-v2020``; the CSVs have no header, the columns
  are in the separate ``.header`` files; a first line equal to the header is accepted).
  Arrival = the job's ``start_time`` (its submission); workers = ``inst_num`` of the task named
  ``worker`` (else of the non-``ps`` task with the most GPUs); a task named ``ps`` makes a
  PS-architecture job with ``ps`` = its ``inst_num``; per-instance demands = (``plan_gpu`` /
  100, ``plan_cpu`` / 100, ``plan_mem`` GB); duration = earliest start to latest end of those
  tasks. Other tasks (evaluator, ...) are ignored, and so are tasks of jobs not in the job table.
- ``gavel``: a Gavel trace (tab-separated, no header: job_type, command, working_dir,
  num_steps_arg, needs_data_dir, total_steps, scale_factor, priority_weight, SLO,
  arrival_time; the older 9-field layout without working_dir is accepted too; see
  shared/data/gavel/README.md). Needs ``throughputs`` (Gavel's ``simulation_throughputs.json``):
  ``step_rate`` = its ``"null"`` iterations/s for (job_type, scale_factor) on ``gpu``, and
  duration = ``total_steps / step_rate``. Workers = ``scale_factor``. Priority and SLO are not
  used.
- ``tiresias``: a Tiresias job CSV (header row; SymbioticLab/Tiresias ``simulator/*.csv``:
  job_id, num_gpu, submit_time, iterations, model_name, duration, interval). Arrival =
  ``submit_time``, duration = ``duration`` (s), one worker per GPU.

Common rules. Arrivals are re-based so that the first job arrives at 0; jobs are sorted by
(arrival, order in the file) and numbered 0..n-1 (``TraceImport.source_ids`` keeps each job's
id in the trace). ``limit`` keeps the first ``limit`` jobs of that order. Jobs without GPUs
(CPU-only jobs) and jobs that ran for zero seconds are not errors: they are dropped and counted
in ``TraceImport.filtered``. Where the trace names the model (Gavel, Tiresias) it is mapped to
one of our workloads by ``MODEL_MAP`` and the trace's name kept in ``Job.job_type``; where it
does not (Philly, Helios, PAI) the model is OUR ASSUMPTION: a uniform draw over
``traces.JOB_MODELS`` from ``random.Random(f"{seed}:model")``, one draw per job in output
order. Utilities are ``traces.sample_utility`` (as in ``philly_like``) drawn from
``random.Random(f"{seed}:utility")`` in output order. Users come from the trace where it has
them, else ``u0``. Demands a trace does not state are the ``Job`` defaults (a worker: 1 GPU,
4 cores, 16 GB). Whether a demand fits a server is left to the simulator.

Errors. A bad row raises ``TraceError`` (file, 1-based row as a user sees it in the file,
field) with ``on_error="stop"``; with ``on_error="skip"`` it is left out and recorded in
``TraceImport.skipped`` as (row, message); the message names the file, which for ``pai`` may
be the task table. A missing file or column, an unreadable file, or no job left is always a
``TraceError``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from workloads.traces import JOB_MODELS, Job, sample_utility

FORMATS = ("philly", "helios", "pai", "gavel", "tiresias")
ON_ERROR = ("stop", "skip")

# A trace's model or job-type name (lower case, Gavel's " (batch size N)" removed) -> our
# workload. Gavel's job types (scheduler/job_table.py), Tiresias's models
# (simulator/models.py), DL2's types (trace.py), and our own names. The nearest model we
# profile where the trace's is not one of ours; a Gavel job's absolute speed comes from
# Gavel's table anyway, the model only shapes placement and interference effects.
MODEL_MAP = {
    # Gavel
    "resnet-50": "resnet50",
    "resnet-18": "resnet50",  # CIFAR-10 ResNet-18: a smaller residual CNN
    "transformer": "transformer",
    "lm": "gpt2",  # LSTM word language model (WikiText-2): the language model we have
    "recommendation": "vgg16",  # autoencoder on ML-20M: dense layers, few FLOPs per byte
    "a3c": "resnet50",  # small Atari CNN policy
    "cyclegan": "inception3",  # convolutional generators and discriminators
    # Tiresias
    "vgg11": "vgg16",
    "vgg16": "vgg16",
    "vgg19": "vgg16",
    "alexnet": "vgg16",  # conv layers plus large dense layers, like VGG
    "resnet50": "resnet50",
    "resnet101": "resnet50",
    "resnet152": "resnet50",
    "inception3": "inception3",
    "inception4": "inception3",
    "googlenet": "inception3",  # Inception v1
    # DL2 and common spellings
    "vgg-16": "vgg16",
    "resnext-110": "resnet50",
    "inception-bn": "inception3",
    "seq2seq": "transformer",
    "wlm": "gpt2",
    "bert": "bert-base",
    "bert-base": "bert-base",
    "gpt2": "gpt2",
    "gpt-2": "gpt2",
}

_TIME_FORMAT = "a time: seconds or YYYY-MM-DD HH:MM:SS"
_HELIOS_COLUMNS = ("job_id", "gpu_num", "submit_time", "start_time", "end_time")
_TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration", "model_name")
PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
GAVEL_COLUMNS = (
    "job_type",
    "command",
    "working_dir",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)


class TraceError(ValueError):
    """A trace that cannot be read. ``str()`` is one line, e.g.
    ``cluster_log.csv row 12: gpu_num: must be an integer >= 0 (got 'x')``.

    path: the file; row: 1-based row (line, or record of a JSON list) as a user sees it in the
    file, the header being row 1 where there is one, None for the whole file; field: the column
    or key, or None.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        row: int | None,
        field: str | None,
        message: str,
        unit: str = "row",
    ) -> None:
        self.path = str(path)
        self.row = row
        self.field = field
        self.message = message
        self.unit = unit
        where = Path(self.path).name if row is None else f"{Path(self.path).name} {unit} {row}"
        super().__init__(": ".join(x for x in (where, field, message) if x))

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (e.g. across worker processes)
        return (TraceError, (self.path, self.row, self.field, self.message, self.unit))


@dataclass(frozen=True)
class TraceImport:
    """What ``load_trace`` read. ``skipped``: (row, message) per bad row left out with
    ``on_error="skip"``; ``filtered``: jobs dropped on purpose (no GPU, zero duration);
    ``source_ids[i]``: the trace's own id of ``jobs[i]``."""

    jobs: tuple[Job, ...]
    skipped: tuple[tuple[int, str], ...]
    source: str
    fmt: str
    filtered: int = 0
    source_ids: tuple[str, ...] = ()


def load_trace(
    path: str | os.PathLike[str],
    fmt: str,
    *,
    on_error: str = "stop",
    throughputs: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    gpu: str = "v100",
    seed: int = 0,
    limit: int | None = None,
) -> TraceImport:
    """Read the trace at ``path`` in format ``fmt`` (one of ``FORMATS``; see the module
    docstring for each format's reading and the rules common to all).

    ``throughputs`` (Gavel's table: a path, or the loaded JSON) and ``gpu`` (a GPU type of that
    table) are used by ``gavel`` only. Raises ``ValueError`` for an unknown ``fmt``,
    ``on_error`` or ``limit``, and ``TraceError`` (a ``ValueError``) for what is wrong with the
    files.
    """
    if fmt not in _PARSERS:
        raise ValueError(f"unknown trace format {fmt!r}; formats: {', '.join(FORMATS)}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)} (got {on_error!r})")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1 or None (got {limit!r})")
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, None, None, "no such file")
    ctx = _Context(path, on_error, throughputs, gpu)
    raws = _PARSERS[fmt](ctx)
    if not raws:
        raise TraceError(
            path, None, None, f"no jobs ({len(ctx.skipped)} skipped, {ctx.filtered} filtered)"
        )
    order = sorted(range(len(raws)), key=lambda i: (raws[i].arrival_s, i))[:limit]
    t0 = raws[order[0]].arrival_s
    rng_model, rng_utility = (random.Random(f"{seed}:{n}") for n in ("model", "utility"))
    jobs = []
    for new_id, i in enumerate(order):
        raw = raws[i]
        jobs.append(
            Job(
                id=new_id,
                arrival_s=raw.arrival_s - t0,
                model=raw.model or rng_model.choice(JOB_MODELS),
                workers=raw.workers,
                duration_s=raw.duration_s,
                arch=raw.arch,
                ps=raw.ps,
                user=raw.user,
                worker_demand=raw.worker_demand,
                ps_demand=raw.ps_demand,
                utility=sample_utility(rng_utility, raw.duration_s),
                step_rate=raw.step_rate,
                job_type=raw.job_type,
            )
        )
    return TraceImport(
        jobs=tuple(jobs),
        skipped=tuple(ctx.skipped),
        source=str(path.resolve()),
        fmt=fmt,
        filtered=ctx.filtered,
        source_ids=tuple(raws[i].source_id for i in order),
    )


def validate_jobs(jobs: tuple[Job, ...] | list[Job]) -> None:
    """Raise ``ValueError`` naming the first job that breaks a rule every trace must keep:
    arrival >= 0, duration > 0 (both finite), workers >= 1, ps >= 0, arch 'allreduce' or
    'ps', a model of ``traces.JOB_MODELS``."""
    for job in jobs:
        problem = _job_problem(job)
        if problem:
            raise ValueError(f"job {job.id}: {problem}")


def _job_problem(job: Job) -> str | None:
    if not (math.isfinite(job.arrival_s) and job.arrival_s >= 0):
        return f"arrival_s must be >= 0 (got {job.arrival_s})"
    if not (math.isfinite(job.duration_s) and job.duration_s > 0):
        return f"duration_s must be > 0 (got {job.duration_s})"
    if job.workers < 1:
        return f"workers must be >= 1 (got {job.workers})"
    if job.ps < 0:
        return f"ps must be >= 0 (got {job.ps})"
    if job.arch not in ("allreduce", "ps"):
        return f"arch must be 'allreduce' or 'ps' (got {job.arch!r})"
    if job.model not in JOB_MODELS:
        return f"model must be one of {', '.join(JOB_MODELS)} (got {job.model!r})"
    return None


def trace_model(name: str) -> str | None:
    """Our workload for a trace's model or job-type name (``MODEL_MAP``), or None."""
    key = re.sub(r"\s*\(batch size \d+\)\s*$", "", name.strip()).lower()
    return MODEL_MAP.get(key)


# --- Reading machinery ---------------------------------------------------------------------

_DEFAULT_WORKER = Job.__dataclass_fields__["worker_demand"].default
_DEFAULT_PS = Job.__dataclass_fields__["ps_demand"].default


@dataclass(frozen=True)
class _Raw:
    """One job as read, before re-basing, ordering and the seeded draws."""

    source_id: str
    arrival_s: float
    duration_s: float
    workers: int
    user: str = "u0"
    model: str | None = None  # None: drawn (the trace does not say)
    job_type: str = ""
    arch: str = "allreduce"
    ps: int = 0
    worker_demand: tuple[float, float, float] = _DEFAULT_WORKER
    ps_demand: tuple[float, float, float] = _DEFAULT_PS
    step_rate: float | None = None


class _RowError(Exception):
    def __init__(
        self, row: int, field: str | None, message: str, path: Path | None = None, unit: str = ""
    ) -> None:
        super().__init__(message)
        self.row, self.field, self.message, self.path, self.unit = row, field, message, path, unit


@dataclass
class _Context:
    path: Path
    on_error: str
    throughputs: str | os.PathLike[str] | Mapping[str, Any] | None
    gpu: str
    unit: str = "row"
    skipped: list[tuple[int, str]] = field(default_factory=list)
    filtered: int = 0

    def reject(self, err: _RowError) -> None:
        """Raise (stop) or record (skip) a bad row."""
        exc = TraceError(
            err.path or self.path, err.row, err.field, err.message, err.unit or self.unit
        )
        if self.on_error == "stop":
            raise exc
        self.skipped.append((err.row, str(exc)))

    def collect(
        self, rows: Iterable[tuple[int, Any]], parse: Callable[[int, Any], _Raw | None]
    ) -> list[_Raw]:
        """Parse every (row, record): a ``_Raw`` is kept, None is filtered out (counted), a
        ``_RowError`` is rejected (stop or skip)."""
        raws = []
        for row, record in rows:
            try:
                raw = parse(row, record)
            except _RowError as e:
                self.reject(e)
                continue
            if raw is None:
                self.filtered += 1
            else:
                raws.append(raw)
        return raws


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError(path, None, None, f"not UTF-8 text ({e.reason})") from e
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read ({e.strerror})") from e


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank row of a CSV file, streamed."""
    with _open(path) as f:
        reader = csv.reader(f)
        try:
            for fields in reader:
                if any(x.strip() for x in fields):
                    yield reader.line_num, [x.strip() for x in fields]
        except (UnicodeDecodeError, csv.Error) as e:
            raise TraceError(path, reader.line_num + 1, None, f"unreadable ({e})") from e


def _tab_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank line split at tabs, as Gavel reads its traces
    (no quoting: commands may hold quotes)."""
    with _open(path) as f:
        line_no = 0
        try:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    yield line_no, [x.strip() for x in line.rstrip("\r\n").split("\t")]
        except UnicodeDecodeError as e:
            raise TraceError(path, line_no + 1, None, f"not UTF-8 text ({e.reason})") from e


def _open(path: Path) -> Any:
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read ({e.strerror})") from e


def _header_rows(ctx: _Context, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV with a header row (row 1) as dicts; checks the required columns and each
    row's field count (a bad count is a bad row)."""
    rows = _csv_rows(ctx.path)
    first = next(rows, None)
    if first is None:
        raise TraceError(ctx.path, None, None, "empty file (no header row)")
    line, header = first
    for column in required:
        if column not in header:
            raise TraceError(
                ctx.path, line, column, f"missing column (the header has: {', '.join(header)})"
            )
    for row, fields in rows:
        if len(fields) != len(header):
            ctx.reject(_RowError(row, None, f"expected {len(header)} fields, got {len(fields)}"))
            continue
        yield row, dict(zip(header, fields, strict=True))


def _int(raw: Any, row: int, name: str, minimum: int = 0) -> int:
    value = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str | float) and not isinstance(raw, bool):
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number == int(number):
            value = int(number)
    if value is None or value < minimum:
        raise _RowError(row, name, f"must be an integer >= {minimum} (got {raw!r})")
    return value


def _float(raw: Any, row: int, name: str, *, positive: bool = False) -> float:
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise _RowError(row, name, f"must be a number {bound} (got {raw!r})")
    return value


def _time(raw: Any, row: int, name: str) -> float:
    """Seconds: a number >= 0 (a trace's own clock) or a date-time (naive = UTC)."""
    if isinstance(raw, str) and raw and not _looks_numeric(raw):
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise _RowError(row, name, f"must be {_TIME_FORMAT} (got {raw!r})") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    try:
        return _float(raw, row, name)
    except _RowError:
        raise _RowError(row, name, f"must be {_TIME_FORMAT} >= 0 (got {raw!r})") from None


def _looks_numeric(text: str) -> bool:
    return re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", text) is not None


def _span(start: float, end: float, row: int, end_field: str, start_field: str) -> float:
    if end < start:
        raise _RowError(row, end_field, f"is before {start_field} ({end} < {start})")
    return end - start


# --- Formats -------------------------------------------------------------------------------


def _philly(ctx: _Context) -> list[_Raw]:
    ctx.unit = "record"
    return ctx.collect(_philly_records(ctx), _philly_job)


def _philly_records(ctx: _Context) -> list[tuple[int, Any]]:
    """A JSON list (row = position in it, from 1) or JSON lines (row = line number)."""
    text = _read_text(ctx.path)
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(ctx.path, e.lineno, None, f"not valid JSON ({e.msg})", "line") from e
        if not isinstance(data, list):
            raise TraceError(ctx.path, None, None, "expected a JSON list of jobs")
        return list(enumerate(data, start=1))
    ctx.unit = "line"
    records = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append((line_no, json.loads(line)))
            except json.JSONDecodeError as e:
                ctx.reject(_RowError(line_no, None, f"not valid JSON ({e.msg})"))
    return records


def _philly_job(row: int, record: Any) -> _Raw | None:
    if not isinstance(record, dict):
        raise _RowError(row, None, "expected a JSON object (one job)")
    arrival = _time(record.get("submitted_time"), row, "submitted_time")
    attempts = record.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        raise _RowError(row, "attempts", "no attempts (the job never ran)")
    if not all(isinstance(a, dict) for a in attempts):
        raise _RowError(row, "attempts", "expected a list of objects")
    first, last = attempts[0], attempts[-1]
    end_name = f"attempts[{len(attempts) - 1}].end_time"
    if first.get("start_time") is None:
        raise _RowError(row, "attempts[0].start_time", "missing")
    if last.get("end_time") is None:
        raise _RowError(row, end_name, "missing (the job was running when the trace was taken)")
    start = _time(first["start_time"], row, "attempts[0].start_time")
    end = _time(last["end_time"], row, end_name)
    duration = _span(start, end, row, end_name, "attempts[0].start_time")
    detail = first.get("detail")
    if not isinstance(detail, list) or not all(isinstance(d, dict) for d in detail):
        raise _RowError(row, "attempts[0].detail", "expected a list of {ip, gpus} objects")
    gpus = sum(len(d.get("gpus") or ()) for d in detail)
    if gpus == 0:
        raise _RowError(row, "attempts[0].detail", "no GPUs listed")
    if duration == 0:
        return None
    return _Raw(
        source_id=str(record.get("jobid", "")),
        arrival_s=arrival,
        duration_s=duration,
        workers=gpus,
        user=str(record.get("user") or "u0"),
    )


def _helios(ctx: _Context) -> list[_Raw]:
    return ctx.collect(_header_rows(ctx, _HELIOS_COLUMNS), _helios_job)


def _helios_job(row: int, rec: dict[str, str]) -> _Raw | None:
    gpus = _int(rec["gpu_num"], row, "gpu_num")
    cpus = _int(rec["cpu_num"], row, "cpu_num") if "cpu_num" in rec else 0
    arrival = _time(rec["submit_time"], row, "submit_time")
    start = _time(rec["start_time"], row, "start_time")
    end = _time(rec["end_time"], row, "end_time")
    duration = _span(start, end, row, "end_time", "start_time")
    if gpus == 0 or duration == 0:
        return None
    cores = cpus / gpus if cpus else _DEFAULT_WORKER[1]
    return _Raw(
        source_id=rec["job_id"],
        arrival_s=arrival,
        duration_s=duration,
        workers=gpus,
        user=rec.get("user") or "u0",
        worker_demand=(1.0, cores, _DEFAULT_WORKER[2]),
    )


def _tiresias(ctx: _Context) -> list[_Raw]:
    return ctx.collect(_header_rows(ctx, _TIRESIAS_COLUMNS), _tiresias_job)


def _tiresias_job(row: int, rec: dict[str, str]) -> _Raw | None:
    gpus = _int(rec["num_gpu"], row, "num_gpu")
    arrival = _float(rec["submit_time"], row, "submit_time")
    duration = _float(rec["duration"], row, "duration", positive=True)
    model = _known_model(rec["model_name"], row, "model_name")
    if gpus == 0:
        return None
    return _Raw(
        source_id=rec["job_id"],
        arrival_s=arrival,
        duration_s=duration,
        workers=gpus,
        model=model,
        job_type=rec["model_name"],
    )


def _known_model(name: str, row: int, field_name: str) -> str:
    model = trace_model(name)
    if model is None:
        known = ", ".join(sorted(MODEL_MAP))
        raise _RowError(row, field_name, f"unknown model {name!r} (known: {known})")
    return model


def _gavel(ctx: _Context) -> list[_Raw]:
    rates = _gavel_rates(ctx)
    return ctx.collect(
        _tab_rows(ctx.path), lambda row, fields: _gavel_job(row, fields, rates, ctx.gpu)
    )


def _gavel_rates(ctx: _Context) -> Mapping[str, Any]:
    """The ``ctx.gpu`` part of Gavel's throughput table."""
    source = ctx.throughputs
    if source is None:
        raise TraceError(
            ctx.path,
            None,
            "throughputs",
            "a Gavel trace gives steps, not seconds: pass throughputs= the path to Gavel's "
            "simulation_throughputs.json to turn them into durations",
        )
    if not isinstance(source, Mapping):
        table_path = Path(source)
        if not table_path.is_file():
            raise TraceError(table_path, None, None, "no such file (the throughput table)")
        try:
            source = json.loads(_read_text(table_path))
        except json.JSONDecodeError as e:
            raise TraceError(table_path, e.lineno, None, f"not valid JSON ({e.msg})", "line") from e
    if not isinstance(source, Mapping) or not isinstance(source.get(ctx.gpu), Mapping):
        have = ", ".join(sorted(source)) if isinstance(source, Mapping) else "nothing"
        raise TraceError(ctx.path, None, "gpu", f"no {ctx.gpu!r} in the throughput table ({have})")
    return source[ctx.gpu]


def _gavel_job(row: int, fields: list[str], rates: Mapping[str, Any], gpu: str) -> _Raw:
    if len(fields) == len(GAVEL_COLUMNS) - 1:  # the older layout without working_dir
        fields = [*fields[:2], "", *fields[2:]]
    if len(fields) != len(GAVEL_COLUMNS):
        raise _RowError(row, None, f"expected 10 tab-separated fields (or 9), got {len(fields)}")
    rec = dict(zip(GAVEL_COLUMNS, fields, strict=True))
    job_type = rec["job_type"]
    model = _known_model(job_type, row, "job_type")
    total_steps = _int(rec["total_steps"], row, "total_steps", minimum=1)
    scale = _int(rec["scale_factor"], row, "scale_factor", minimum=1)
    arrival = _float(rec["arrival_time"], row, "arrival_time")
    entry = rates.get(f"('{job_type}', {scale})")
    rate = entry.get("null") if isinstance(entry, Mapping) else None
    if not isinstance(rate, int | float) or not rate > 0:
        raise _RowError(
            row, "job_type", f"no throughput for ({job_type!r}, {scale}) on {gpu} in the table"
        )
    return _Raw(
        source_id=f"line {row}",
        arrival_s=arrival,
        duration_s=total_steps / rate,
        workers=scale,
        model=model,
        job_type=job_type,
        step_rate=float(rate),
    )


@dataclass(frozen=True)
class _Task:
    row: int
    name: str
    instances: int
    start: float
    end: float
    demand: tuple[float, float, float]


def _pai(ctx: _Context) -> list[_Raw]:
    task_path = ctx.path.parent / "pai_task_table.csv"
    if not task_path.is_file():
        raise TraceError(
            task_path, None, None, "no such file (PAI's task table, read beside the job table)"
        )
    tasks, broken = _pai_tasks(ctx, task_path)
    raws = []
    seen: dict[str, int] = {}
    for row, fields in _pai_rows(ctx.path, PAI_JOB_COLUMNS):
        try:
            if len(fields) != len(PAI_JOB_COLUMNS):
                raise _RowError(row, None, f"expected 6 fields, got {len(fields)}")
            rec = dict(zip(PAI_JOB_COLUMNS, fields, strict=True))
            if rec["job_name"] in seen:
                raise _RowError(row, "job_name", f"same job as row {seen[rec['job_name']]}")
            seen[rec["job_name"]] = row
            if rec["job_name"] in broken:  # already reported at its task row
                continue
            raw = _pai_job(row, rec, tasks.get(rec["job_name"], []), task_path)
        except _RowError as e:
            ctx.reject(e)
            continue
        if raw is None:
            ctx.filtered += 1
        else:
            raws.append(raw)
    return raws


def _pai_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    for row, fields in _csv_rows(path):
        if row == 1 and tuple(fields) == columns:
            continue  # a header someone added
        yield row, fields


def _pai_tasks(ctx: _Context, task_path: Path) -> tuple[dict[str, list[_Task]], set[str]]:
    """Tasks by job name, and the jobs with a bad task row (reported here)."""
    tasks: dict[str, list[_Task]] = {}
    broken: set[str] = set()
    for row, fields in _pai_rows(task_path, PAI_TASK_COLUMNS):
        try:
            task = _pai_task(row, fields)
        except _RowError as e:
            e.path = task_path
            if fields and fields[0]:
                broken.add(fields[0])
            ctx.reject(e)
            continue
        tasks.setdefault(fields[0], []).append(task)
    return tasks, broken


def _pai_task(row: int, fields: list[str]) -> _Task:
    if len(fields) != len(PAI_TASK_COLUMNS):
        raise _RowError(row, None, f"expected 10 fields, got {len(fields)}")
    rec = dict(zip(PAI_TASK_COLUMNS, fields, strict=True))
    # An unset time is empty or 0 in the release (the task never started or never ended).
    start = _float(rec["start_time"] or "0", row, "start_time")
    end = _float(rec["end_time"] or "0", row, "end_time")
    demand = (
        _float(rec["plan_gpu"] or "0", row, "plan_gpu") / 100.0,  # empty: a task without GPUs
        _float(rec["plan_cpu"], row, "plan_cpu") / 100.0,
        _float(rec["plan_mem"], row, "plan_mem"),
    )
    instances = _int(rec["inst_num"], row, "inst_num", minimum=1)
    return _Task(row, rec["task_name"], instances, start, end, demand)


def _pai_job(row: int, rec: dict[str, str], tasks: list[_Task], task_path: Path) -> _Raw | None:
    arrival = _float(rec["start_time"], row, "start_time")
    if not tasks:
        raise _RowError(row, "job_name", f"no task of {rec['job_name']!r} in {task_path.name}")
    ps_tasks = [t for t in tasks if t.name == "ps"]
    others = [t for t in tasks if t.name != "ps"]
    if not others:
        raise _RowError(row, "job_name", f"only ps tasks in {task_path.name}, no worker task")
    named = [t for t in others if t.name == "worker"]
    worker = named[0] if named else max(others, key=lambda t: t.demand[0] * t.instances)
    if worker.demand[0] == 0:
        return None  # a CPU-only job
    used = [worker, *ps_tasks]
    for task in used:
        if task.start == 0:
            raise _RowError(task.row, "start_time", "missing (the task never started)", task_path)
        if task.end == 0:
            raise _RowError(task.row, "end_time", "missing (the task never ended)", task_path)
        if task.end < task.start:
            raise _RowError(task.row, "end_time", "is before start_time", task_path)
    duration = max(t.end for t in used) - min(t.start for t in used)
    if duration == 0:
        return None
    return _Raw(
        source_id=rec["job_name"],
        arrival_s=arrival,
        duration_s=duration,
        workers=worker.instances,
        user=rec["user"] or "u0",
        arch="ps" if ps_tasks else "allreduce",
        ps=sum(t.instances for t in ps_tasks),
        worker_demand=worker.demand,
        ps_demand=ps_tasks[0].demand if ps_tasks else _DEFAULT_PS,
    )


_PARSERS: dict[str, Callable[[_Context], list[_Raw]]] = {
    "philly": _philly,
    "helios": _helios,
    "pai": _pai,
    "gavel": _gavel,
    "tiresias": _tiresias,
}
