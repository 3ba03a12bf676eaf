"""Regression detection over the nightly history of one metric, tuned not to cry wolf.

Two tests judge the latest night, both over the *segment*: the nights since the latest
``expected_change`` annotation (the annotated night is the first of the new regime: a human
marked a change they expected, and the baseline resets there, like conbench's "distribution
change"). A segment needs ``min_history`` nights before the latest one, else the verdict is
"insufficient-history".

1. Point test (conbench's lookback z-score). The baseline is the last ``window`` nights before
   the latest one. Outlier nights are left out by the modified z-score rule of Iglewicz and
   Hoaglin (1993): a night is dropped when |x - median| > 3.5 * 1.4826 * MAD (1.4826 * MAD
   estimates the std of normal noise; it is floored like the std below, so that wiggles under
   the floor never count as outliers). The std of the remaining n nights is floored at
   ``min_rel_std`` * |mean|, so that a flat (e.g. deterministic simulator) history does not turn
   a 0.1% wiggle into z = 50. z is the prediction statistic
   (latest - mean) / (std * sqrt(1 + 1/n)) read through Student's t with n - 1 degrees of freedom
   and reported as the normal z of the same tail probability: a std estimated from 5-10 nights
   is often far too small by chance (a plain z > 4 fired on about one 60-night history in seven
   at 2% Gaussian noise); read through t, z = 4 has the same tail probability whatever n.
2. Step test (one change point, in the spirit of asv's step detection). Over the last
   ``2 * window`` nights of the segment, every split with >= ``min_history`` nights before and
   >= ``min_step_points`` nights after it (the after side always ends at the latest night) is
   scored by t = (median after - median before) / (1.2533 * sigma * sqrt(1/n_before + 1/n_after)),
   where sigma is the root mean square of the residuals of each side from its own median, after
   the same outlier rule, with df = residuals kept - 2 and the same floor; 1.2533 = sqrt(pi/2)
   is the standard error of a median relative to a mean under normal noise. t is read through
   Student's t as above, and the split with the largest |z| is reported. Medians, not means, so
   that one bad night after the split is not mistaken for a sustained step: the median after the
   split moves only when at least half of those nights moved. A step stays reported while it
   lies in the last ``2 * window`` nights; annotate it (``expected_change``) to accept it sooner.

Either test fires only when |z| > ``z_threshold`` AND the relative change exceeds
``min_rel_change`` (conbench likewise pairs a z threshold with a percent threshold). A change in
the good direction (per ``lower_is_better``) is reported as "improvement", never as "alert";
any alert outranks any improvement, and a point finding outranks a step finding of the same
status. ``z`` keeps its sign: positive means the value rose. A single wild night is a point
alert for that night only; the next normal night is judged "ok" again.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

Status = Literal["ok", "alert", "improvement", "insufficient-history"]
Kind = Literal["point", "step"]

MAD_TO_STD = 1.4826  # std of normal noise = 1.4826 * MAD
OUTLIER_CUTOFF = 3.5  # modified z-score cut-off (Iglewicz & Hoaglin 1993)
MEDIAN_SE = math.sqrt(math.pi / 2.0)  # se(median) / se(mean) under normal noise


@dataclass(frozen=True)
class Point:
    """One night's value of the metric; ``expected_change`` resets the baseline here."""

    value: float
    label: str = ""
    timestamp: datetime | None = None
    expected_change: bool = False


@dataclass(frozen=True)
class Thresholds:
    """Detection settings of one metric (see the module docstring for how each is used)."""

    metric: str = "value"
    lower_is_better: bool = True
    z_threshold: float = 4.0
    min_rel_change: float = 0.05
    window: int = 10
    min_history: int = 5
    min_rel_std: float = 0.01
    min_step_points: int = 3

    def __post_init__(self) -> None:
        checks = {
            "z_threshold": self.z_threshold > 0,
            "min_rel_change": self.min_rel_change >= 0,
            "min_history": self.min_history >= 2,
            "window": self.window >= self.min_history,
            "min_rel_std": self.min_rel_std >= 0,
            "min_step_points": self.min_step_points >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"Thresholds.{name} is out of range: {getattr(self, name)!r}")


# Starting points, the same for every metric except the direction; tune per metric from its
# observed noise. The fallback is stricter because an unknown metric's noise is unknown, and
# treats lower as better (most of what we track is a time); pass Thresholds for anything else.
DEFAULT_THRESHOLDS: dict[str, Thresholds] = {
    "iteration_time_s": Thresholds("iteration_time_s", lower_is_better=True),
    "throughput_samples_per_s": Thresholds("throughput_samples_per_s", lower_is_better=False),
    "avg_jct_s": Thresholds("avg_jct_s", lower_is_better=True),
    "total_utility": Thresholds("total_utility", lower_is_better=False),
    "speedup": Thresholds("speedup", lower_is_better=False),
}
FALLBACK_THRESHOLDS = Thresholds("*", lower_is_better=True, z_threshold=5.0, min_rel_change=0.10)


def thresholds_for(metric: str) -> Thresholds:
    """The metric's default thresholds, or the fallback under the metric's name."""
    default = DEFAULT_THRESHOLDS.get(metric)
    return default or dataclasses.replace(FALLBACK_THRESHOLDS, metric=metric)


@dataclass(frozen=True)
class Finding:
    """The verdict on the latest night. ``z``/``rel_change`` compare it with the baseline
    (relative change as a fraction; nan when the history is insufficient); ``step_*`` describe
    the best split of the step test (``step_index`` indexes ``points``: the first night after
    the split; None when no split could be scored)."""

    metric: str
    status: Status
    kind: Kind | None
    value: float
    z: float
    rel_change: float
    baseline_mean: float
    baseline_std: float
    baseline_n: int
    excluded_outliers: int
    step_index: int | None
    step_z: float
    step_rel_change: float
    message: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class _Step:
    offset: int  # index of the first night after the split, within the scored tail
    z: float
    rel_change: float
    n_after: int


def detect(points: Sequence[Point | float], thresholds: Thresholds) -> Finding:
    """Judge the latest of ``points`` (chronological; bare numbers are taken as Points).

    Raises ValueError naming the offending item for a non-numeric or non-finite value."""
    pts = _coerce(points)
    start = max((i for i, p in enumerate(pts) if p.expected_change), default=0)
    segment = np.array([p.value for p in pts[start:]], dtype=float)
    if segment.size < thresholds.min_history + 1:
        return _insufficient(pts, start, segment.size, thresholds)
    history = segment[:-1][-thresholds.window :]
    kept = _without_outliers(history, thresholds.min_rel_std * abs(float(np.median(history))))
    mean = float(kept.mean())
    std = _floored_std(kept, mean, thresholds.min_rel_std)
    latest = float(segment[-1])
    z = _prediction_z(latest - mean, std, kept.size)
    rel = _ratio(latest - mean, abs(mean))
    tail = segment[-2 * thresholds.window :]
    step = _best_step(tail, thresholds)
    point_status = _judge(z, rel, thresholds)
    step_status = _judge(step.z, step.rel_change, thresholds) if step else "ok"
    status, kind = _combine(point_status, step_status)
    step_index = None if step is None else len(pts) - tail.size + step.offset
    finding = Finding(
        metric=thresholds.metric,
        status=status,
        kind=kind,
        value=latest,
        z=z,
        rel_change=rel,
        baseline_mean=mean,
        baseline_std=std,
        baseline_n=int(kept.size),
        excluded_outliers=int(history.size - kept.size),
        step_index=step_index,
        step_z=math.nan if step is None else step.z,
        step_rel_change=math.nan if step is None else step.rel_change,
        message="",
    )
    return dataclasses.replace(finding, message=_message(finding, pts, history.size, step))


def _coerce(points: Sequence[Point | float]) -> list[Point]:
    out = []
    for i, p in enumerate(points):
        value = p.value if isinstance(p, Point) else p
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"points[{i}] must be a number or a Point, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"points[{i}] must be finite, got {value!r}")
        out.append(p if isinstance(p, Point) else Point(float(value)))
    return out


def _without_outliers(values: np.ndarray, min_std: float) -> np.ndarray:
    """Drop values whose modified z-score exceeds OUTLIER_CUTOFF (module docstring); the noise
    scale is floored at ``min_std`` so that wiggles below the floor are never outliers."""
    deviation = np.abs(values - np.median(values))
    scale = max(MAD_TO_STD * float(np.median(deviation)), min_std)
    return values[deviation <= OUTLIER_CUTOFF * scale]


def _floored_std(kept: np.ndarray, mean: float, min_rel_std: float) -> float:
    sample = float(kept.std(ddof=1)) if kept.size >= 2 else 0.0
    return max(sample, min_rel_std * abs(mean))


def _prediction_z(deviation: float, std: float, n: int) -> float:
    """The latest night's deviation from the mean of ``n`` baseline nights as an equivalent
    normal z: the prediction t statistic deviation / (std * sqrt(1 + 1/n)) with n - 1 degrees
    of freedom (module docstring)."""
    return _normal_z(_ratio(deviation, std * math.sqrt(1.0 + 1.0 / n)), n - 1)


def _normal_z(t: float, df: int) -> float:
    """The normal quantile with the same tail probability as Student's t with ``df``."""
    if df < 1 or not math.isfinite(t):
        return t
    return math.copysign(float(sps.norm.isf(sps.t.sf(abs(t), df))), t)


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, with a zero denominator giving 0 (no change) or +-inf."""
    if denominator > 0:
        return numerator / denominator
    return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)


def _best_step(tail: np.ndarray, t: Thresholds) -> _Step | None:
    """The split of ``tail`` with the largest |z| (module docstring), or None if none fits."""
    best = None
    for s in range(t.min_history, tail.size - t.min_step_points + 1):
        step = _split(tail, s, t.min_rel_std)
        if best is None or abs(step.z) > abs(best.z):
            best = step
    return best


def _split(tail: np.ndarray, s: int, min_rel_std: float) -> _Step:
    """Median after minus median before ``s``, in standard errors (module docstring)."""
    before, after = tail[:s], tail[s:]
    mb, ma = float(np.median(before)), float(np.median(after))
    kept = _without_outliers(np.concatenate([before - mb, after - ma]), min_rel_std * abs(mb))
    df = max(kept.size - 2, 1)
    sigma = max(math.sqrt(float(np.sum(kept**2)) / df), min_rel_std * abs(mb))
    se = MEDIAN_SE * sigma * math.sqrt(1.0 / before.size + 1.0 / after.size)
    return _Step(s, _normal_z(_ratio(ma - mb, se), df), _ratio(ma - mb, abs(mb)), after.size)


def _judge(z: float, rel: float, t: Thresholds) -> Status:
    if abs(z) <= t.z_threshold or abs(rel) <= t.min_rel_change:
        return "ok"
    worse = rel > 0 if t.lower_is_better else rel < 0
    return "alert" if worse else "improvement"


def _combine(point: Status, step: Status) -> tuple[Status, Kind | None]:
    for status in ("alert", "improvement"):
        if point == status:
            return status, "point"
        if step == status:
            return status, "step"
    return "ok", None


def _name(pts: list[Point], index: int) -> str:
    p = pts[index]
    if p.label:
        return p.label
    return p.timestamp.isoformat() if p.timestamp else f"night #{index}"


def _insufficient(pts: list[Point], start: int, n: int, t: Thresholds) -> Finding:
    since = f" since the baseline reset at {_name(pts, start)}" if start > 0 else ""
    message = (
        f"{t.metric}: {max(n - 1, 0)} night(s) of history{since}; "
        f"{t.min_history} are needed before the latest night is judged"
    )
    nan = math.nan
    return Finding(
        metric=t.metric,
        status="insufficient-history",
        kind=None,
        value=pts[-1].value if pts else nan,
        z=nan,
        rel_change=nan,
        baseline_mean=nan,
        baseline_std=nan,
        baseline_n=0,
        excluded_outliers=0,
        step_index=None,
        step_z=nan,
        step_rel_change=nan,
        message=message,
    )


def _message(f: Finding, pts: list[Point], window: int, step: _Step | None) -> str:
    if f.kind == "step" and step is not None and f.step_index is not None:
        direction = "up" if f.step_rel_change > 0 else "down"
        text = (
            f"{f.metric} stepped {direction} {abs(f.step_rel_change):.1%} at "
            f"{_name(pts, f.step_index)} and stayed there for {step.n_after} nights "
            f"(z={f.step_z:.1f})"
        )
    elif f.kind == "point":
        moved = "rose" if f.rel_change > 0 else "fell"
        side = "over" if f.rel_change > 0 else "under"
        text = (
            f"{f.metric} {moved} {abs(f.rel_change):.1%} {side} its {window}-night baseline "
            f"(z={f.z:.1f})"
        )
    else:
        change = f"{f.rel_change:+.1%}, z={f.z:.1f}"
        text = f"{f.metric} is within its {window}-night baseline ({change})"
    if f.excluded_outliers and f.status != "ok":
        text += f"; {f.excluded_outliers} outlier night(s) left out of the baseline"
    return text + ("; improvement" if f.status == "improvement" else "")
