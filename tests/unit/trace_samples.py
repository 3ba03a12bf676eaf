"""Small sample files in the public trace formats, written by the tests (nothing downloaded).

Each writer puts a few well-formed jobs in ``folder`` and appends ``extra`` rows or records
as given (to add malformed ones); it returns the path to hand to ``load_trace``. The column
layouts follow the public releases (see ``workloads/importers.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _attempt(start: str, end: str | None, *machines: int) -> dict[str, Any]:
    detail = [
        {"ip": f"m{k}", "gpus": [f"gpu{g}" for g in range(n)]} for k, n in enumerate(machines)
    ]
    return {"start_time": start, "end_time": end, "detail": detail}


def philly_jobs() -> list[dict[str, Any]]:
    """Records 1-3: two jobs (the second submitted first) and one that ran zero seconds."""
    return [
        {
            "status": "Pass",
            "vc": "ee9e8c",
            "jobid": "application_1",
            "submitted_time": "2017-10-07 01:11:39",
            "user": "ce2f4c",
            "attempts": [
                _attempt("2017-10-07 01:12:09", "2017-10-07 01:13:23", 2),
                _attempt("2017-10-07 01:13:30", "2017-10-07 02:13:30", 2),
            ],
        },
        {
            "status": "Killed",
            "vc": "ee9e8c",
            "jobid": "application_2",
            "submitted_time": "2017-10-07 01:00:00",
            "user": "aa11bb",
            "attempts": [_attempt("2017-10-07 01:05:00", "2017-10-07 03:05:00", 4, 4)],
        },
        {
            "status": "Failed",
            "vc": "ee9e8c",
            "jobid": "application_3",
            "submitted_time": "2017-10-07 01:20:00",
            "user": "aa11bb",
            "attempts": [_attempt("2017-10-07 01:21:00", "2017-10-07 01:21:00", 1)],
        },
    ]


def write_philly(folder: Path, extra: Sequence[Any] = ()) -> Path:
    path = folder / "cluster_job_log"
    path.write_text(json.dumps([*philly_jobs(), *extra], indent=1))
    return path


HELIOS_HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
HELIOS_ROWS = [  # rows 2-5; row 4 is a CPU-only job
    "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,"
    "2020-06-10 04:55:09,36848,0",
    "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,"
    "2020-06-09 18:45:36,249,0",
    "1425513,uzqls,vcpDC,0,4,1,COMPLETED,2020-06-09 18:41:28,2020-06-09 18:41:28,"
    "2020-06-09 18:50:00,512,0",
    "1425509,uXBbc,vcJkd,8,64,1,COMPLETED,2020-06-09 18:40:00,2020-06-09 18:40:30,"
    "2020-06-09 19:40:30,3600,30",
]


def write_helios(
    folder: Path,
    extra: Sequence[str] = (),
    header: str = HELIOS_HEADER,
    rows: list[str] | None = None,
) -> Path:
    path = folder / "cluster_log.csv"
    lines = [header, *(HELIOS_ROWS if rows is None else rows), *extra]
    path.write_text("\n".join(lines) + "\n")
    return path


PAI_JOBS = [  # no header, as released: job_name, inst_id, user, status, start_time, end_time
    "job_a,inst_a,user1,Terminated,1000.0,5000.0",
    "job_b,inst_b,user2,Terminated,900.0,3000.0",
    "job_c,inst_c,user3,Terminated,1200.0,2000.0",
]
# job_name, task_name, inst_num, status, start, end, plan_cpu, plan_mem, plan_gpu, gpu_type
PAI_TASKS = [
    "job_a,ps,2.0,Terminated,1100.0,4000.0,600.0,29.296875,0.0,MISC",
    "job_a,worker,4.0,Terminated,1050.0,4100.0,400.0,20.0,50.0,V100",
    "job_a,evaluator,1.0,Terminated,1050.0,4200.0,100.0,2.0,0.0,MISC",
    "job_b,tensorflow,1.0,Terminated,950.0,2950.0,600.0,30.0,100.0,P100",
    "job_c,worker,1.0,Terminated,1300.0,1900.0,100.0,4.0,,MISC",
]


def write_pai(
    folder: Path, extra_jobs: Sequence[str] = (), extra_tasks: Sequence[str] = ()
) -> Path:
    (folder / "pai_task_table.csv").write_text("\n".join([*PAI_TASKS, *extra_tasks]) + "\n")
    path = folder / "pai_job_table.csv"
    path.write_text("\n".join([*PAI_JOBS, *extra_jobs]) + "\n")
    return path


def gavel_line(job_type: str, total_steps: object, scale: object, arrival: object) -> str:
    command = f'python3 main.py --name "{job_type}" -b 64'  # quotes, as real commands have
    return "\t".join(
        [job_type, command, "workdir", "--num_steps", "1", str(total_steps), str(scale)]
        + ["1", "-1.000000", str(arrival)]
    )


GAVEL_LINES = [
    gavel_line("ResNet-50 (batch size 64)", 7931, 1, 0),
    gavel_line("Transformer (batch size 16)", 11005, 2, 30),
    gavel_line("LM (batch size 10)", 73486, 1, 10.5),
]
GAVEL_TABLE = {  # Gavel's layout, made-up numbers
    "v100": {
        "('ResNet-50 (batch size 64)', 1)": {"null": 10.0},
        "('Transformer (batch size 16)', 2)": {"null": 20.0},
        "('LM (batch size 10)', 1)": {"null": 50.0},
    },
    "k80": {"('ResNet-50 (batch size 64)', 1)": {"null": 2.0}},
}


def write_gavel(folder: Path, extra: Sequence[str] = (), lines: list[str] | None = None) -> Path:
    path = folder / "sample.trace"
    path.write_text("\n".join([*(GAVEL_LINES if lines is None else lines), *extra]) + "\n")
    return path


def write_gavel_table(folder: Path) -> Path:
    path = folder / "throughputs.json"
    path.write_text(json.dumps(GAVEL_TABLE))
    return path


TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
TIRESIAS_ROWS = [  # rows 2-5
    "0,1,100,606,vgg19,164,30",
    "1,8,130,133,googlenet,147,23",
    "2,2,153,157,resnet50,127,26",
    "3,0,160,100,alexnet,50,10",  # no GPU: filtered
]


def write_tiresias(folder: Path, extra: Sequence[str] = (), header: str = TIRESIAS_HEADER) -> Path:
    path = folder / "tiresias.csv"
    path.write_text("\n".join([header, *TIRESIAS_ROWS, *extra]) + "\n")
    return path
