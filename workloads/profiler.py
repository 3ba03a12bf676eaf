"""Make a workload profile from a torch model definition: one forward pass, forward hooks.

Only shapes are used, never values, so the model is built and run on torch's "meta"
device by default: no memory for VGG-16's 528 MB of weights, no random init, and the same
numbers as a CPU run (`--device cpu` does the same pass on real CPU tensors).
"""

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workloads import PROFILES_DIR
from workloads.models import build_model, get_spec

BYTES_PER_PARAM = 4  # fp32 training

FLOPS_RULE = (
    "fwd_flops per sample, FLOPs = 2 x MACs; counted only for modules that own parameters: "
    "Conv1d/2d/3d = 2*Cin/groups*prod(kernel)*numel(out) (+numel(out) for bias) "
    "[= 2*Cin/groups*kh*kw*Cout*Hout*Wout for 2D], Linear = 2*in*numel(out) (+numel(out) "
    "for bias), BatchNorm/LayerNorm/GroupNorm/InstanceNorm = 2*numel(out) (eval-mode affine), "
    "any other module with parameters = 2*numel(out) (marked flops_rule='fallback'); "
    "parameter-free ops (ReLU, pooling, dropout, residual adds, flatten) are not counted"
)

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORMS = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm,
    nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d,
)  # fmt: skip


def _numel(output: Any) -> int:
    """Elements in a module's output; tuples/lists (e.g. RNNs) are summed."""
    if isinstance(output, torch.Tensor):
        return output.numel()
    if isinstance(output, (tuple, list)):
        return sum(_numel(o) for o in output)
    return 0


def _fwd_flops(module: nn.Module, output: Any) -> tuple[int, str]:
    """(FLOPs of one call with batch size 1, name of the rule used); see FLOPS_RULE."""
    out = _numel(output)
    has_bias = getattr(module, "bias", None) is not None
    if isinstance(module, _CONVS):
        # weight: (Cout, Cin/groups, *kernel); each output element is one dot product.
        macs_per_out = module.weight[0].numel()  # Cin/groups * prod(kernel)
        return 2 * macs_per_out * out + (out if has_bias else 0), "conv"
    if isinstance(module, nn.Linear):
        return 2 * module.in_features * out + (out if has_bias else 0), "linear"
    if isinstance(module, _NORMS):
        # Eval-mode norm folds to one multiply and one add per output element.
        return 2 * out, "norm"
    return 2 * out, "fallback"


def profile_layers(model: nn.Module, input_shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """One entry per module that owns parameters directly, in order of first call.

    Runs one eval-mode forward pass of `model` with a batch of 1 zero sample of
    `input_shape`, on the device the model's parameters are on. A module called more than
    once has its FLOPs summed; a parameter shared by two modules counts at its first use.
    Raises RuntimeError if a parameter-owning module is never called (its parameters
    would be missing from the layers).
    """
    owners = {
        module: mod_name or "(root)"
        for mod_name, module in model.named_modules()
        if next(module.parameters(recurse=False), None) is not None
    }
    order: list[nn.Module] = []  # first-call order
    flops: dict[nn.Module, int] = {}
    rules: dict[nn.Module, str] = {}

    # Pre-hook for the order: a module is "executed" when it starts, which matters for
    # modules that own parameters and also have children.
    def pre_hook(module: nn.Module, args: Any) -> None:
        if module not in flops:
            order.append(module)
            flops[module] = 0

    def post_hook(module: nn.Module, args: Any, output: Any) -> None:
        call_flops, rules[module] = _fwd_flops(module, output)
        flops[module] += call_flops

    device = next(model.parameters(), torch.empty(0)).device
    handles = []
    for module in owners:
        handles.append(module.register_forward_pre_hook(pre_hook))
        handles.append(module.register_forward_hook(post_hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros((1, *input_shape), device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()

    missing = [owners[m] for m in owners if m not in flops]
    if missing:
        raise RuntimeError(f"forward pass never called {', '.join(missing)}")

    layers = []
    seen: set[int] = set()
    for module in order:
        params = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for p in params)
        count = sum(p.numel() for p in params)
        layers.append(
            {
                "name": owners[module],
                "module_type": type(module).__name__,
                "param_count": count,
                "param_bytes": count * BYTES_PER_PARAM,
                "fwd_flops": flops[module],
                "flops_rule": rules[module],
            }
        )
    return layers


def profile_model(name: str, device: str = "meta") -> dict[str, Any]:
    """The profile of registered model `name` as a JSON-ready dict, in the file's key order.

    Builds the model on `device` and profiles it with `profile_layers`. The result does
    not depend on `device` (only shapes are used), so "meta" and "cpu" give the same dict.
    """
    spec = get_spec(name)
    with torch.device(device):
        model = build_model(name)
    layers = profile_layers(model, spec.input_shape)
    total = sum(p.numel() for p in model.parameters())
    if total != sum(layer["param_count"] for layer in layers):
        raise RuntimeError(f"{name}: layers do not add up to the model's {total} parameters")
    return {
        "name": name,
        "default_batch_size": spec.default_batch_size,
        "sample_unit": spec.sample_unit,
        "input_shape": list(spec.input_shape),
        "total_param_count": total,
        "source": {
            "kind": "torch-definition+analytic-flops",
            "model": spec.builder,
            "torch_version": torch.__version__,
            "flops_rule": FLOPS_RULE,
            "param_bytes_rule": f"{BYTES_PER_PARAM} bytes per parameter (fp32)",
            "generated_by": f"python -m workloads profile {name}",
        },
        "layers": layers,
    }


def dumps(profile: dict[str, Any]) -> str:
    """Stable JSON text: indented, one line per layer so diffs show which layer changed."""
    lines = []
    for key, value in profile.items():
        if key == "layers":
            rows = ",\n".join(f"    {json.dumps(layer)}" for layer in value)
            text = f"[\n{rows}\n  ]"
        elif isinstance(value, dict):
            text = json.dumps(value, indent=2).replace("\n", "\n  ")
        else:
            text = json.dumps(value)
        lines.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def profile_path(name: str, profiles_dir: Path = PROFILES_DIR) -> Path:
    return profiles_dir / f"{name}.json"


def write_profile(name: str, profiles_dir: Path = PROFILES_DIR, device: str = "meta") -> Path:
    """Profile `name` and write it to `<profiles_dir>/<name>.json`; returns the path."""
    path = profile_path(name, profiles_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(profile_model(name, device)))
    return path


def _diff_paths(stored: Any, fresh: Any, path: str = "") -> list[str]:
    """JSON paths (e.g. "layers[3].fwd_flops") where two parsed JSON values differ."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = []
        for key in list(stored) + [k for k in fresh if k not in stored]:
            sub = f"{path}.{key}" if path else key
            if key not in stored or key not in fresh:
                out.append(sub)
            else:
                out += _diff_paths(stored[key], fresh[key], sub)
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{path} (length {len(stored)} -> {len(fresh)})"]
        out = []
        for i, (a, b) in enumerate(zip(stored, fresh, strict=True)):
            out += _diff_paths(a, b, f"{path}[{i}]")
        return out
    return [] if stored == fresh else [path]


def check_profile(name: str, profiles_dir: Path = PROFILES_DIR, device: str = "meta") -> str | None:
    """None if the stored profile equals a fresh one byte for byte, else a one-line summary."""
    path = profile_path(name, profiles_dir)
    fresh = dumps(profile_model(name, device))
    if not path.exists():
        return f"{name}: no stored profile at {path}"
    stored = path.read_text()
    if stored == fresh:
        return None
    try:
        diffs = _diff_paths(json.loads(stored), json.loads(fresh))
    except json.JSONDecodeError as exc:
        return f"{name}: stored profile is not valid JSON ({exc})"
    if not diffs:
        return f"{name}: same content, different formatting"
    shown = ", ".join(diffs[:5]) + (f", ... ({len(diffs) - 5} more)" if len(diffs) > 5 else "")
    return f"{name}: stale profile, {len(diffs)} field(s) differ: {shown}"
