"""Measured profiles: time real training steps of a registered model, layer by layer.

`python -m workloads profile NAME --measure` builds the model on this machine's CPU or CUDA
device, runs forward + backward passes in training mode on a random batch and writes
per-layer median forward and backward times to `profiles/measured/<name>@<label>.json`, in
the layer order of the analytic profile (`workloads.load_measured` reads them back).

Imports torch; `workloads` itself does not.
"""

import datetime
import gc
import os
import platform
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import workloads
from workloads import LABEL_PATTERN, MEASURED_DIR, measured_path
from workloads.models import build_model, get_spec
from workloads.profiler import dumps, profile_model

DEFAULT_REPEATS = 5
DEFAULT_WARMUP = 2
LABEL_RE = re.compile(LABEL_PATTERN)

METHOD = (
    "Training mode, fp32, one random batch of batch_size samples (standard-normal images or "
    "uniform token ids) on the device; per step: gradients set to None, forward, loss = sum "
    "over the model's outputs of mean(output), backward; no optimizer step. warmup steps "
    "first, then repeats timed steps; each layer's time is the median over the timed steps. "
    "Before the timed steps the garbage collector collects once and freezes what survives "
    "(gc.freeze, as the real runs' processes do before their timed loop: a full collection "
    "then scans only what the steps allocate), unfrozen after the measurement. "
    "Timestamps: time.perf_counter after torch.cuda.synchronize() (CUDA) at every event. "
    "Forward: a forward hook at the end of each parameter-owning module's call; a layer's "
    "fwd_s is the time from the previous such event (or the start of the forward pass) to "
    "the end of its own call, so parameter-free ops (activations, pooling, residual adds, "
    "attention matmuls, softmax) count towards the NEXT parameter-owning layer, like the "
    "FLOPs rule; ops after the last layer count towards the last one. Backward: a full "
    "backward pre-hook at the start of each layer's backward (its output gradient is ready); "
    "a layer's bwd_s is the time from its backward start to the next layer's backward start "
    "(or the end of backward), so it includes its weight gradient and the backward of the "
    "parameter-free ops that precede it in the forward pass; the loss's backward and that "
    "of the ops after the last layer count towards the first layer to start its backward. "
    "A module called several times has its times summed. Loss computation is not timed. "
    "In-place activations (inplace=True modules) are switched to out-of-place during the "
    "measurement, because backward hooks forbid in-place changes of a module's output. The "
    "hooks' own overhead (a Python call and, on CUDA, a device synchronisation per event) "
    "is included in the times. After each step's backward, each layer's parameters (its own, "
    "a tied parameter with the first layer that owns it) get a momentum-SGD update as the "
    "lab's real engine and torch.optim.SGD on CPU apply it, one parameter at a time "
    "(momentum buffer *= 0.9, += gradient; parameter -= lr * buffer, with lr = 1e-9), timed "
    "per layer: update_s, the median over the timed steps (0 for a layer without parameters). "
    "step_s: each timed step's forward + backward + updates, in order."
)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cuda_short_name(device_name: str) -> str:
    """A lower-case label from a CUDA device name: "NVIDIA H100 80GB HBM3" -> "h100",
    "Tesla V100-SXM2-16GB" -> "v100", "NVIDIA GeForce RTX 4090" -> "rtx4090"."""
    vendor = {"nvidia", "tesla", "geforce", "quadro"}
    words = [w for w in re.split(r"[\s_]+", device_name) if w and w.lower() not in vendor]
    if not words:
        return "cuda"
    first = words[0].split("-")[0].lower()
    if first.isalpha() and len(words) > 1:  # "RTX 4090": glue on the model number
        first += words[1].split("-")[0].lower()
    return re.sub(r"[^a-z0-9._-]", "", first) or "cuda"


def default_label(device: str) -> str:
    """ "cpu" for the CPU, else the short name of the CUDA device (see cuda_short_name)."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return "cpu"
    return cuda_short_name(torch.cuda.get_device_name(dev))


def _sample_batch(name: str, batch_size: int, device: torch.device) -> torch.Tensor:
    """A random input batch for registered model `name`, seeded for repeatability."""
    spec = get_spec(name)
    gen = torch.Generator().manual_seed(0)
    shape = (batch_size, *spec.input_shape)
    if spec.input_dtype == "int64":
        batch = torch.randint(0, spec.num_classes, shape, generator=gen)
    else:
        batch = torch.randn(shape, generator=gen, dtype=getattr(torch, spec.input_dtype))
    return batch.to(device)


def _loss(output: Any) -> torch.Tensor:
    """Sum over the tensors in `output` (a tensor or a tuple of them) of their mean."""
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    return sum(_loss(o) for o in output)  # type: ignore[return-value]


def measure_layers(
    model: nn.Module,
    layer_names: list[str],
    batch: torch.Tensor,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    progress: Callable[[str], None] | None = None,
    before_timed: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Time `warmup` + `repeats` training steps of `model` on `batch` (see METHOD).
    `before_timed`, if given, is called once between the warm-up and the timed steps (a barrier
    with other measuring processes: `file_barrier`), after the garbage collector is settled
    (one collection, then ``gc.freeze``, as the real runs' processes before their timed loop;
    unfrozen when the measurement ends, unless the caller had frozen it already).

    layer_names: the parameter-owning modules to report, by qualified name, in the order
    wanted (the analytic profile's). The model and batch must be on the same device; the
    model is put in training mode and its in-place modules are made out-of-place. Returns
    {"fwd_s": [...], "bwd_s": [...], "update_s": [...], "step_fwd_s": median forward,
    "step_bwd_s": median backward, "step_s": [each timed step's forward + backward +
    updates]}. Raises ValueError if a named module does not exist or is never called.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    modules = dict(model.named_modules())
    unknown = [n for n in layer_names if n not in modules]
    if unknown:
        raise ValueError(f"no module(s) named {', '.join(unknown)} in {type(model).__name__}")
    layers = [modules[n] for n in layer_names]
    index = {module: i for i, module in enumerate(layers)}
    cuda = batch.device.type == "cuda"

    def now() -> float:
        if cuda:
            torch.cuda.synchronize(batch.device)
        return time.perf_counter()

    n = len(layers)
    state: dict[str, Any] = {}

    def fwd_hook(module: nn.Module, args: Any, output: Any) -> None:
        t = now()
        i = index[module]
        state["fwd"][i] += t - state["cursor"]
        state["called"][i] = True
        state["cursor"], state["last"] = t, i

    def bwd_pre_hook(module: nn.Module, grad_output: Any) -> None:
        t = now()
        i = index[module]
        owner = i if state["current"] is None else state["current"]
        state["bwd"][owner] += t - state["cursor"]
        state["cursor"], state["current"] = t, i

    for module in model.modules():
        if isinstance(getattr(module, "inplace", None), bool):
            module.inplace = False
    model.train()
    handles = []
    for module in layers:
        handles.append(module.register_forward_hook(fwd_hook))
        handles.append(module.register_full_backward_pre_hook(bwd_pre_hook))
    fwd_runs: list[list[float]] = []
    bwd_runs: list[list[float]] = []
    upd_runs: list[list[float]] = []
    seen: set[int] = set()
    own_params: list[list[nn.Parameter]] = []
    for module in layers:
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        own_params.append([p for p in own if id(p) not in seen])
        seen.update(id(p) for p in own)
    momentum: dict[int, torch.Tensor] = {}

    @torch.no_grad()
    def update(params: list[nn.Parameter]) -> None:
        for p in params:
            if p.grad is None:
                continue
            buf = momentum.get(id(p))
            if buf is None:
                buf = momentum[id(p)] = p.grad.clone()
            else:
                buf.mul_(0.9).add_(p.grad)
            p.add_(buf, alpha=-1e-9)

    frozen = False
    try:
        for step in range(warmup + repeats):
            if step == warmup:
                gc.collect()  # as the real runs' processes settle it (worker.settle_gc)
                frozen = gc.get_freeze_count() == 0  # a caller's own freeze: left to it
                gc.freeze()
                if before_timed is not None:
                    before_timed()
            model.zero_grad(set_to_none=True)
            state.update(fwd=[0.0] * n, bwd=[0.0] * n, called=[False] * n, last=None)
            state["cursor"] = start = now()
            output = model(batch)
            t = now()
            if state["last"] is not None:
                state["fwd"][state["last"]] += t - state["cursor"]
            fwd_end = t
            loss = _loss(output)
            state["cursor"], state["current"] = now(), None
            bwd_start = state["cursor"]
            with warnings.catch_warnings():
                # The first layer's input needs no gradient; torch warns that its backward
                # hooks then fire on the output gradient, which is when the pre-hook is meant
                # to fire anyway.
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                loss.backward()
            t = now()
            if state["current"] is not None:
                state["bwd"][state["current"]] += t - state["cursor"]
            never = [layer_names[i] for i in range(n) if not state["called"][i]]
            if never:
                raise ValueError(f"the training forward pass never called {', '.join(never)}")
            kind = "warm-up" if step < warmup else "repeat"
            count = f"{step + 1}/{warmup}" if step < warmup else f"{step - warmup + 1}/{repeats}"
            if progress:
                progress(
                    f"{kind} {count}: forward {fwd_end - start:.3f} s, "
                    f"backward {t - bwd_start:.3f} s"
                )
            upd = []
            for params in own_params:
                began = now()
                update(params)
                upd.append(now() - began)
            if step >= warmup:
                fwd_runs.append(state["fwd"] + [fwd_end - start])
                bwd_runs.append(state["bwd"] + [t - bwd_start])
                upd_runs.append(upd)
            del output, loss
    finally:
        if frozen:
            gc.unfreeze()  # back to the collector's generations (the caller may live on)
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    fwd = [statistics.median(run[i] for run in fwd_runs) for i in range(n + 1)]
    bwd = [statistics.median(run[i] for run in bwd_runs) for i in range(n + 1)]
    upd = [statistics.median(run[i] for run in upd_runs) for i in range(n)]
    return {
        "fwd_s": fwd[:n],
        "bwd_s": bwd[:n],
        "update_s": upd,
        "step_fwd_s": fwd[n],
        "step_bwd_s": bwd[n],
        "step_s": [
            f[n] + b[n] + sum(u) for f, b, u in zip(fwd_runs, bwd_runs, upd_runs, strict=True)
        ],
    }


def measure_profile(
    name: str,
    device: str = "cpu",
    batch_size: int | None = None,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    label: str | None = None,
    progress: Callable[[str], None] | None = None,
    before_timed: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The measured profile of registered model `name` on `device`, as a JSON-ready dict.
    `before_timed`: see measure_layers.

    batch_size: samples per step (default: the model's default_batch_size). label: the
    file label (default: default_label(device)). The layer order and names are those of a
    fresh analytic profile of the same definition. Raises ValueError for an unknown model
    or a bad label, RuntimeError if `device` is CUDA and torch cannot use CUDA.
    """
    spec = get_spec(name)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available to torch on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"measuring needs a cpu or cuda device, not '{device}'")
    label = label or default_label(device)
    if not LABEL_RE.fullmatch(label):
        raise ValueError(f"bad label '{label}' (letters, digits, '.', '_', '-')")
    batch_size = batch_size or spec.default_batch_size
    layer_names = [layer["name"] for layer in profile_model(name, "meta")["layers"]]
    torch.manual_seed(0)
    with torch.device(dev):
        model = build_model(name)
    load = _load_average()
    times = measure_layers(
        model,
        layer_names,
        _sample_batch(name, batch_size, dev),
        repeats,
        warmup,
        progress,
        before_timed,
    )
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name(dev)
        extra = {
            "cuda_version": torch.version.cuda,
            "tf32": {
                "matmul": torch.backends.cuda.matmul.allow_tf32,
                "cudnn": torch.backends.cudnn.allow_tf32,
            },
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
    else:
        device_name = cpu_model()
        extra = {"torch_threads": torch.get_num_threads()}
    command = (
        f"python -m workloads profile {name} --measure --device {device} "
        f"--batch-size {batch_size} --repeats {repeats} --warmup {warmup} --label {label}"
    )
    return {
        "workload": name,
        "label": label,
        "batch_size": batch_size,
        "sample_unit": spec.sample_unit,
        "source": {
            "kind": "measured",
            "model": spec.builder,
            "device": str(dev),
            "device_name": device_name,
            "cpu_model": cpu_model(),
            **extra,
            "load_average_at_start": load,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "platform": platform.platform(),
            "repeats": repeats,
            "warmup": warmup,
            "step_fwd_s": _round(times["step_fwd_s"]),
            "step_bwd_s": _round(times["step_bwd_s"]),
            "step_s": [_round(t) for t in times["step_s"]],
            "method": METHOD,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "command": command,
        },
        "layers": [
            {"name": layer, "fwd_s": _round(f), "bwd_s": _round(b), "update_s": _round(u)}
            for layer, f, b, u in zip(
                layer_names, times["fwd_s"], times["bwd_s"], times["update_s"], strict=True
            )
        ],
    }


def memory_refusal(name: str, batch_size: int | None, device: str) -> str | None:
    """Why measuring ``name`` at ``batch_size`` (None: its default) on ``device`` would not fit
    in memory, or None: the estimate of a training process (``WorkloadProfile.
    training_bytes``; on the CPU its step counted ``HOST_HEAP_SLACK`` times for glibc's heap,
    with the process) against 80 % of this machine's available memory on the CPU, or 90 % of
    the GPU's free memory on CUDA. Said before anything is measured, not by the kernel's OOM
    killer half way."""
    profile = workloads.load_profile(name)
    batch = batch_size or profile.default_batch_size
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        have, share = torch.cuda.mem_get_info(index)[0], workloads.GPU_MEMORY_SHARE
        where, need = f"{device} has", profile.training_bytes(batch)
    else:
        have, share = workloads.available_memory(), workloads.HOST_MEMORY_SHARE
        where, need = "this machine has", profile.cpu_worker_bytes(batch)
    if have is None or need <= share * have:
        return None
    return (
        f"{name} at batch size {batch} needs about {need / 2**30:.1f} GiB (its training step "
        f"{profile.step_bytes(batch) / 2**30:.1f} GiB), {where} {have / 2**30:.1f} GiB "
        f"free; measure it with a smaller --batch-size or on a larger machine"
    )


def _load_average() -> list[float] | None:
    """The host's 1/5/15-minute load averages (other work skews the times), if known."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _round(seconds: float) -> float:
    """Seconds to the nanosecond (far below the timer's real precision)."""
    return round(seconds, 9)


def write_measured(
    name: str,
    device: str = "cpu",
    batch_size: int | None = None,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    label: str | None = None,
    measured_dir: Path = MEASURED_DIR,
    progress: Callable[[str], None] | None = None,
    before_timed: Callable[[], None] | None = None,
) -> Path:
    """Measure `name` (see measure_profile) and write `<measured_dir>/<name>@<label>.json`."""
    measured = measure_profile(
        name, device, batch_size, repeats, warmup, label, progress, before_timed
    )
    path = measured_path(name, measured["label"], measured_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(measured))
    return path


def file_barrier(directory: Path, parties: int, timeout_s: float = 300.0) -> Callable[[], None]:
    """A barrier between `parties` measuring processes on this machine: each one's call
    leaves a file in `directory` and returns once `parties` files are there (polled every
    millisecond, so the processes start their timed steps within about a millisecond of each
    other). Raises TimeoutError after `timeout_s` (a party that never came)."""

    def wait() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{os.getpid()}.ready").touch()
        deadline = time.monotonic() + timeout_s
        while len(list(directory.glob("*.ready"))) < parties:
            if time.monotonic() > deadline:
                arrived = len(list(directory.glob("*.ready")))
                raise TimeoutError(
                    f"barrier {directory}: {arrived} of {parties} processes after {timeout_s:g} s"
                )
            time.sleep(0.001)

    return wait


def stderr_progress(prefix: str) -> Callable[[str], None]:
    """A progress callback printing `<prefix>: <message>` lines to stderr."""

    def report(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    return report
