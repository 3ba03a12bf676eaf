"""Importers of public cluster traces, on small sample files the tests write themselves."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from tests.unit import trace_samples as samples
from workloads.importers import (
    FORMATS,
    MODEL_MAP,
    TraceError,
    TraceImport,
    load_trace,
    trace_model,
    validate_jobs,
)
from workloads.traces import JOB_MODELS, Job

GAVEL_TABLE = Path(__file__).resolve().parents[3] / "shared/data/gavel/simulation_throughputs.json"


def write(fmt: str, folder: Path) -> tuple[Path, dict]:
    """A good sample of ``fmt`` and the keyword arguments it needs."""
    if fmt == "gavel":
        return samples.write_gavel(folder), {"throughputs": samples.write_gavel_table(folder)}
    writer = {
        "philly": samples.write_philly,
        "helios": samples.write_helios,
        "pai": samples.write_pai,
        "tiresias": samples.write_tiresias,
    }[fmt]
    return writer(folder), {}


# --- Every format -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_gives_valid_jobs_rebased_sorted_and_numbered(fmt, tmp_path):
    path, kwargs = write(fmt, tmp_path)
    result = load_trace(path, fmt, **kwargs)
    assert isinstance(result, TraceImport) and result.fmt == fmt
    assert result.source == str(path.resolve())
    validate_jobs(result.jobs)
    assert [j.id for j in result.jobs] == list(range(len(result.jobs)))
    assert result.jobs[0].arrival_s == 0.0
    arrivals = [j.arrival_s for j in result.jobs]
    assert arrivals == sorted(arrivals)
    assert all(j.model in JOB_MODELS for j in result.jobs)
    assert len(result.source_ids) == len(result.jobs)
    assert result.skipped == ()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_is_deterministic_for_a_seed(fmt, tmp_path):
    path, kwargs = write(fmt, tmp_path)
    assert load_trace(path, fmt, seed=3, **kwargs) == load_trace(path, fmt, seed=3, **kwargs)
    a, b = load_trace(path, fmt, seed=3, **kwargs), load_trace(path, fmt, seed=4, **kwargs)
    assert [j.utility for j in a.jobs] != [j.utility for j in b.jobs]


@pytest.mark.parametrize("fmt", FORMATS)
def test_limit_keeps_the_first_jobs_by_arrival(fmt, tmp_path):
    path, kwargs = write(fmt, tmp_path)
    full = load_trace(path, fmt, **kwargs)
    first = load_trace(path, fmt, limit=1, **kwargs)
    assert len(first.jobs) == 1 and first.jobs[0] == full.jobs[0]
    assert first.source_ids == full.source_ids[:1]


def test_a_missing_file_is_an_error_naming_the_path(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(TraceError) as err:
        load_trace(missing, "helios")
    assert err.value.path == str(missing) and "nope.csv" in str(err.value)


def test_an_unknown_format_lists_the_formats(tmp_path):
    with pytest.raises(ValueError, match="philly, helios, pai, gavel, tiresias"):
        load_trace(samples.write_helios(tmp_path), "slurm")


def test_on_error_and_limit_are_checked(tmp_path):
    path = samples.write_helios(tmp_path)
    with pytest.raises(ValueError, match="on_error"):
        load_trace(path, "helios", on_error="ignore")
    with pytest.raises(ValueError, match="limit"):
        load_trace(path, "helios", limit=0)


# --- Philly ----------------------------------------------------------------------------------


def test_philly_reads_gpus_from_the_first_attempt_and_spans_all_attempts(tmp_path):
    result = load_trace(samples.write_philly(tmp_path), "philly")
    assert result.source_ids == ("application_2", "application_1")
    early, late = result.jobs
    assert (early.workers, early.duration_s, early.user) == (8, 7200.0, "aa11bb")
    # submitted 01:11:39 vs 01:00:00; first start 01:12:09 to last end 02:13:30
    assert (late.arrival_s, late.workers, late.duration_s, late.user) == (
        699.0,
        2,
        3681.0,
        "ce2f4c",
    )
    assert result.filtered == 1  # the job that ran zero seconds


def test_philly_models_are_a_seeded_draw_over_our_models(tmp_path):
    path = samples.write_philly(tmp_path, extra=samples.philly_jobs() * 10)
    models = {
        seed: [j.model for j in load_trace(path, "philly", seed=seed).jobs] for seed in (0, 1)
    }
    assert models[0] != models[1]
    assert set(models[0]) <= set(JOB_MODELS) and len(set(models[0])) > 1


def test_philly_job_without_attempts_stops_or_is_skipped(tmp_path):
    no_attempts = {"jobid": "application_9", "submitted_time": "2017-10-07 01:30:00"}
    path = samples.write_philly(tmp_path, extra=[{**no_attempts, "attempts": []}])
    with pytest.raises(TraceError) as err:
        load_trace(path, "philly")
    assert (err.value.row, err.value.field) == (4, "attempts")
    assert str(err.value).startswith("cluster_job_log record 4: attempts: no attempts")
    result = load_trace(path, "philly", on_error="skip")
    assert len(result.jobs) == 2
    assert result.skipped == ((4, str(err.value)),)


def test_philly_still_running_job_and_bad_times_are_errors(tmp_path):
    running = dict(
        samples.philly_jobs()[0], attempts=[samples._attempt("2017-10-07 01:12:09", None, 1)]
    )
    backwards = dict(
        samples.philly_jobs()[0],
        attempts=[samples._attempt("2017-10-07 05:00:00", "2017-10-07 04:00:00", 1)],
    )
    garbled = dict(samples.philly_jobs()[0], submitted_time="yesterday")
    path = samples.write_philly(tmp_path, extra=[running, backwards, garbled])
    result = load_trace(path, "philly", on_error="skip")
    assert [(row, msg.split(": ")[1]) for row, msg in result.skipped] == [
        (4, "attempts[0].end_time"),
        (5, "attempts[0].end_time"),
        (6, "submitted_time"),
    ]
    assert "running when the trace was taken" in result.skipped[0][1]


def test_philly_not_json_names_the_line(tmp_path):
    path = tmp_path / "cluster_job_log"
    path.write_text('[\n{"jobid": 1},\n{oops}\n]')
    with pytest.raises(TraceError, match=r"cluster_job_log line 3: not valid JSON"):
        load_trace(path, "philly")


# --- Helios ----------------------------------------------------------------------------------


def test_helios_filters_cpu_jobs_and_splits_cpus_over_gpus(tmp_path):
    result = load_trace(samples.write_helios(tmp_path), "helios")
    assert result.filtered == 1 and result.skipped == ()
    assert result.source_ids == ("1425509", "1425511", "1425512")
    first, second, third = result.jobs
    assert (first.workers, first.duration_s, first.worker_demand[:2]) == (8, 3600.0, (1.0, 8.0))
    assert (second.arrival_s, second.duration_s, second.user) == (61.0, 36848.0, "uXBbc")
    assert third.worker_demand[1] == 4.0  # 16 CPUs over 4 GPUs


def test_helios_bad_row_names_file_row_and_field(tmp_path):
    t = "2020-06-09 19:00:00"
    bad = f"1425520,uA,vcA,x,1,1,COMPLETED,{t},{t},{t},0,0"
    path = samples.write_helios(tmp_path, extra=[bad])  # header = row 1, 4 rows, so row 6
    with pytest.raises(TraceError) as err:
        load_trace(path, "helios")
    assert str(err.value) == "cluster_log.csv row 6: gpu_num: must be an integer >= 0 (got 'x')"
    assert (Path(err.value.path).name, err.value.row, err.value.field) == (
        "cluster_log.csv",
        6,
        "gpu_num",
    )
    copy = pickle.loads(pickle.dumps(err.value))
    assert (str(copy), copy.row, copy.field) == (str(err.value), 6, "gpu_num")


def test_helios_skip_mode_records_every_bad_row_and_keeps_the_rest(tmp_path):
    t = "2020-06-09 19:00:00"
    extra = [
        f"1,uA,vcA,x,1,1,COMPLETED,{t},{t},{t},0,0",  # row 6: non-numeric
        f"2,uA,vcA,1,1,1,COMPLETED,{t},{t},2020-06-09 18:00:00,0,0",  # row 7: end before start
        "3,uA,vcA,1,1,1,COMPLETED,-5,10,20,10,0",  # row 8: negative time
        "4,uA,vcA,1,1",  # row 9: too few fields
        f"5,uA,vcA,2,4,1,COMPLETED,{t},{t},2020-06-09 19:30:00,1800,0",  # row 10: good
    ]
    result = load_trace(samples.write_helios(tmp_path, extra=extra), "helios", on_error="skip")
    assert [row for row, _ in result.skipped] == [6, 7, 8, 9]
    fields = [message.split(": ")[1] for _, message in result.skipped]
    assert fields == ["gpu_num", "end_time", "submit_time", "expected 12 fields, got 5"]
    assert all(message.startswith("cluster_log.csv row ") for _, message in result.skipped)
    assert len(result.jobs) == 4 and "5" in result.source_ids


def test_helios_missing_column_is_named(tmp_path):
    header = samples.HELIOS_HEADER.replace("gpu_num,", "")
    rows = [",".join(r.split(",")[:3] + r.split(",")[4:]) for r in samples.HELIOS_ROWS]
    with pytest.raises(TraceError) as err:
        load_trace(samples.write_helios(tmp_path, header=header, rows=rows), "helios")
    assert (err.value.row, err.value.field) == (1, "gpu_num")
    assert str(err.value).startswith("cluster_log.csv row 1: gpu_num: missing column")


def test_helios_accepts_extra_columns_such_as_jobname(tmp_path):
    header = samples.HELIOS_HEADER.replace("vc,", "vc,jobname,")
    rows = [",".join(r.split(",")[:3] + ["train"] + r.split(",")[3:]) for r in samples.HELIOS_ROWS]
    result = load_trace(samples.write_helios(tmp_path, header=header, rows=rows), "helios")
    assert len(result.jobs) == 3


def test_a_trace_with_no_job_left_is_an_error(tmp_path):
    cpu_only = [samples.HELIOS_ROWS[2]]
    with pytest.raises(TraceError, match=r"cluster_log.csv: no jobs \(0 skipped, 1 filtered\)"):
        load_trace(samples.write_helios(tmp_path, rows=cpu_only), "helios")
    with pytest.raises(TraceError, match="no jobs"):
        load_trace(samples.write_helios(tmp_path, rows=[]), "helios")
    bad = ["1,uA,vcA,x,1,1,COMPLETED,1,2,3,1,0"]
    with pytest.raises(TraceError, match=r"no jobs \(1 skipped, 0 filtered\)"):
        load_trace(samples.write_helios(tmp_path, rows=bad), "helios", on_error="skip")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty file"):
        load_trace(empty, "helios")


# --- PAI -------------------------------------------------------------------------------------


def test_pai_reads_ps_jobs_and_percent_demands(tmp_path):
    result = load_trace(samples.write_pai(tmp_path), "pai")
    assert result.source_ids == ("job_b", "job_a") and result.filtered == 1  # job_c: no GPU
    single, ps_job = result.jobs
    assert (single.arch, single.workers, single.worker_demand) == ("allreduce", 1, (1.0, 6.0, 30.0))
    assert single.duration_s == 2000.0 and single.user == "user2"
    assert (ps_job.arch, ps_job.workers, ps_job.ps) == ("ps", 4, 2)
    assert ps_job.arrival_s == 100.0
    assert ps_job.worker_demand == (0.5, 4.0, 20.0)
    assert ps_job.ps_demand == (0.0, 6.0, 29.296875)
    assert ps_job.duration_s == 4100.0 - 1050.0  # worker and ps tasks; the evaluator ignored


def test_pai_needs_the_task_table_beside_the_job_table(tmp_path):
    path = samples.write_pai(tmp_path)
    (tmp_path / "pai_task_table.csv").unlink()
    with pytest.raises(TraceError, match="pai_task_table.csv: no such file"):
        load_trace(path, "pai")


def test_pai_bad_task_row_names_the_task_table_and_skip_drops_only_its_job(tmp_path):
    bad_task = "job_d,worker,2.0,Terminated,1500.0,2500.0,400.0,20.0,lots,V100"
    path = samples.write_pai(
        tmp_path, extra_jobs=["job_d,inst_d,user4,Terminated,1400.0,2600.0"], extra_tasks=[bad_task]
    )
    with pytest.raises(TraceError) as err:
        load_trace(path, "pai")
    assert (
        str(err.value) == "pai_task_table.csv row 6: plan_gpu: must be a number >= 0 (got 'lots')"
    )
    result = load_trace(path, "pai", on_error="skip")
    assert result.source_ids == ("job_b", "job_a")
    assert result.skipped == ((6, str(err.value)),)


def test_pai_job_without_tasks_or_times_is_a_bad_row(tmp_path):
    path = samples.write_pai(
        tmp_path,
        extra_jobs=[
            "job_e,inst_e,user5,Terminated,1400.0,2600.0",  # row 4: no task
            "job_f,inst_f,user5,Running,1400.0,",  # row 5: its worker never ended
            "job_g,inst_g,user5,Terminated,oops,2600.0",  # row 6: bad time
        ],
        extra_tasks=["job_f,worker,1.0,Running,1500.0,,100.0,4.0,100.0,V100"],
    )
    result = load_trace(path, "pai", on_error="skip")
    assert [m.split(": ")[0] for _, m in result.skipped] == [
        "pai_job_table.csv row 4",
        "pai_task_table.csv row 6",
        "pai_job_table.csv row 6",
    ]
    assert "no task of 'job_e'" in result.skipped[0][1]
    assert "end_time: missing" in result.skipped[1][1]


def test_pai_repeated_job_is_a_bad_row(tmp_path):
    path = samples.write_pai(tmp_path, extra_jobs=[samples.PAI_JOBS[0]])
    with pytest.raises(TraceError, match="pai_job_table.csv row 4: job_name: same job as row 1"):
        load_trace(path, "pai")


def test_pai_accepts_a_header_line(tmp_path):
    path = samples.write_pai(tmp_path)
    path.write_text(
        "job_name,inst_id,user,status,start_time,end_time\n" + "\n".join(samples.PAI_JOBS)
    )
    assert len(load_trace(path, "pai").jobs) == 2


# --- Gavel -----------------------------------------------------------------------------------


def test_gavel_without_throughputs_says_to_pass_them(tmp_path):
    with pytest.raises(TraceError, match="pass throughputs=") as err:
        load_trace(samples.write_gavel(tmp_path), "gavel")
    assert err.value.field == "throughputs"


def test_gavel_turns_steps_into_durations_with_the_table(tmp_path):
    table = samples.write_gavel_table(tmp_path)
    result = load_trace(samples.write_gavel(tmp_path), "gavel", throughputs=table)
    by_type = {j.job_type: j for j in result.jobs}
    resnet = by_type["ResNet-50 (batch size 64)"]
    assert (resnet.step_rate, resnet.duration_s, resnet.workers) == (10.0, 793.1, 1)
    assert resnet.model == "resnet50"
    transformer = by_type["Transformer (batch size 16)"]
    assert (transformer.workers, transformer.step_rate) == (2, 20.0)
    assert transformer.duration_s == pytest.approx(11005 / 20.0)
    assert by_type["LM (batch size 10)"].model == "gpt2"
    assert [j.arrival_s for j in result.jobs] == [0.0, 10.5, 30.0]
    k80 = load_trace(
        samples.write_gavel(tmp_path, lines=samples.GAVEL_LINES[:1]),
        "gavel",
        throughputs=samples.GAVEL_TABLE,  # a loaded table works too
        gpu="k80",
    )
    assert k80.jobs[0].step_rate == 2.0


def test_gavel_accepts_the_older_nine_field_layout(tmp_path):
    line = samples.GAVEL_LINES[0].split("\t")
    del line[2]  # no working_dir
    result = load_trace(
        samples.write_gavel(tmp_path, lines=["\t".join(line)]),
        "gavel",
        throughputs=samples.GAVEL_TABLE,
    )
    assert result.jobs[0].duration_s == pytest.approx(793.1)


def test_gavel_bad_rows(tmp_path):
    extra = [
        samples.gavel_line("Sorting (batch size 1)", 100, 1, 5),  # row 4: unknown model
        samples.gavel_line("LM (batch size 10)", 100, 8, 5),  # row 5: not in the table
        samples.gavel_line("LM (batch size 10)", "many", 1, 5),  # row 6
        samples.gavel_line("LM (batch size 10)", 100, 1, -1),  # row 7: negative arrival
        "LM (batch size 10)\tonly three\tfields",  # row 8
    ]
    path = samples.write_gavel(tmp_path, extra=extra)
    result = load_trace(path, "gavel", throughputs=samples.GAVEL_TABLE, on_error="skip")
    assert [m.split(": ", 2)[:2] for _, m in result.skipped] == [
        ["sample.trace row 4", "job_type"],
        ["sample.trace row 5", "job_type"],
        ["sample.trace row 6", "total_steps"],
        ["sample.trace row 7", "arrival_time"],
        ["sample.trace row 8", "expected 10 tab-separated fields (or 9), got 3"],
    ]
    assert len(result.jobs) == 3
    with pytest.raises(TraceError, match="gpu: no 'a100'"):
        load_trace(path, "gavel", throughputs=samples.GAVEL_TABLE, gpu="a100")


def test_gavel_step_rate_is_the_real_tables_value(tmp_path):
    if not GAVEL_TABLE.is_file():
        pytest.skip(f"Gavel's throughput table is not at {GAVEL_TABLE}")
    table = json.loads(GAVEL_TABLE.read_text())
    lines = [samples.gavel_line("ResNet-50 (batch size 64)", 7931, 1, 0)]
    lines.append(samples.gavel_line("Transformer (batch size 16)", 11005, 2, 60))
    path = samples.write_gavel(tmp_path, lines=lines)
    for gpu in ("v100", "k80"):
        result = load_trace(path, "gavel", throughputs=GAVEL_TABLE, gpu=gpu)
        resnet, transformer = result.jobs
        expected = table[gpu]["('ResNet-50 (batch size 64)', 1)"]["null"]
        assert resnet.step_rate == expected
        assert resnet.duration_s == pytest.approx(7931 / expected)
        assert transformer.step_rate == table[gpu]["('Transformer (batch size 16)', 2)"]["null"]


# --- Tiresias --------------------------------------------------------------------------------


def test_tiresias_maps_model_names_and_keeps_them(tmp_path):
    result = load_trace(samples.write_tiresias(tmp_path), "tiresias")
    assert [(j.model, j.job_type, j.workers) for j in result.jobs] == [
        ("vgg16", "vgg19", 1),
        ("inception3", "googlenet", 8),
        ("resnet50", "resnet50", 2),
    ]
    assert [j.arrival_s for j in result.jobs] == [0.0, 30.0, 53.0]
    assert [j.duration_s for j in result.jobs] == [164.0, 147.0, 127.0]
    assert result.filtered == 1


def test_tiresias_bad_rows_and_missing_column(tmp_path):
    extra = ["4,1,170,100,vgg16,soon,10", "5,1,170,100,lenet,10,10", "6,1,180,100,vgg16,0,10"]
    result = load_trace(samples.write_tiresias(tmp_path, extra=extra), "tiresias", on_error="skip")
    assert [m.split(": ")[:2] for _, m in result.skipped] == [
        ["tiresias.csv row 6", "duration"],
        ["tiresias.csv row 7", "model_name"],
        ["tiresias.csv row 8", "duration"],
    ]
    header = samples.TIRESIAS_HEADER.replace("model_name", "model")
    with pytest.raises(TraceError, match="row 1: model_name: missing column"):
        load_trace(samples.write_tiresias(tmp_path, header=header), "tiresias")


# --- Model names and validation --------------------------------------------------------------


def test_every_mapped_model_is_one_of_ours():
    assert set(MODEL_MAP.values()) <= set(JOB_MODELS)
    assert trace_model("ResNet-18 (batch size 256)") == "resnet50"
    assert trace_model(" Recommendation (batch size 8192) ") == "vgg16"
    assert trace_model("lenet") is None


def test_validate_jobs_names_the_job_and_the_rule():
    good = Job(id=7, arrival_s=0.0, model="gpt2", workers=1, duration_s=10.0)
    validate_jobs([good])
    cases = {
        "arrival_s must be >= 0": {"arrival_s": -1.0},
        "duration_s must be > 0": {"duration_s": 0.0},
        "workers must be >= 1": {"workers": 0},
        "model must be one of": {"model": "resnet50-debug"},
    }
    for message, change in cases.items():
        with pytest.raises(ValueError, match=f"job 7: {message}"):
            validate_jobs([good, dataclasses.replace(good, **change)])
