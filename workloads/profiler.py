"""Make a workload profile from a torch model definition: one forward pass, forward hooks,
plus a torch.fx trace for the data-flow dependencies between layers.

Only shapes are used, never values, so the model is built and run on torch's "meta"
device by default: no memory for VGG-16's 528 MB of weights, no random init, and the same
numbers as a CPU run (`--device cpu` does the same pass on real CPU tensors).
"""

import json
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from workloads import PROFILES_DIR
from workloads.models import build_model, get_spec

BYTES_PER_PARAM = 4  # fp32 training

FLOPS_RULE = (
    "fwd_flops per sample, FLOPs = 2 x MACs; counted for modules that own parameters: "
    "Conv1d/2d/3d = 2*Cin/groups*prod(kernel)*numel(out) (+numel(out) for bias) "
    "[= 2*Cin/groups*kh*kw*Cout*Hout*Wout for 2D], Linear = 2*in*numel(out) (+numel(out) "
    "for bias), BatchNorm/LayerNorm/GroupNorm/InstanceNorm = 2*numel(out) (eval-mode affine), "
    "Embedding = 0 (a lookup), any other module with parameters = 2*numel(out) (marked "
    "flops_rule='fallback'); plus parameter-free matrix products run outside those modules "
    "(matmul/@, bmm, mm: 2*prod(batch)*n*k*m, e.g. attention's QK^T and AV) = 2 x their MACs, "
    "attributed to the NEXT parameter-owning module called (for attention: its output "
    "projection; marked flops_rule='<rule>+matmul'; any left after the last module go to the "
    "last one); other parameter-free ops (ReLU, softmax, pooling, dropout, residual adds, "
    "concatenation, flatten) are not counted"
)
DEPS_RULE = (
    "deps: indices into layers of the parameter-owning modules whose outputs reach this "
    "module's input through parameter-free ops only (its nearest parameter-owning ancestors "
    "in the data-flow graph), from a torch.fx symbolic trace (eval mode) with "
    "parameter-owning modules as leaves; [] = fed only by the model input and constants; "
    "a module called several times gets the union over its calls, without itself; a "
    "parameter read outside its module counts as that module's output"
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
    if isinstance(module, nn.Embedding):
        return 0, "embedding"
    return 2 * out, "fallback"


# Parameter-free matrix products that the FLOPs rule counts, by torch function name
# (`a @ b` reaches __torch_function__ as Tensor.matmul).
_MATMULS = {"matmul", "__matmul__", "__rmatmul__", "bmm", "mm"}


def _matmul_flops(name: str, args: tuple[Any, ...]) -> int:
    """2 x MACs of a matmul-like call on (..., n, k) @ (..., k, m) tensors, else 0.

    Follows torch.matmul's broadcasting: a 1-D operand is a vector; batch dims broadcast.
    """
    if name not in _MATMULS or len(args) < 2:
        return 0
    a, b = (args[1], args[0]) if name == "__rmatmul__" else (args[0], args[1])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return 0
    a_shape = a.shape if a.dim() > 1 else (1, *a.shape)
    b_shape = b.shape if b.dim() > 1 else (*b.shape, 1)
    batch = torch.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    n, k, m = a_shape[-2], a_shape[-1], b_shape[-1]
    return 2 * torch.Size(batch).numel() * n * k * m


class _MatmulCounter(TorchFunctionMode):
    """Adds up the FLOPs of matmul-like calls made while `outside()` is true."""

    def __init__(self, outside: Any) -> None:
        super().__init__()
        self.outside = outside
        self.pending = 0

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if self.outside():
            self.pending += _matmul_flops(getattr(func, "__name__", ""), tuple(args))
        return func(*args, **(kwargs or {}))


class _LayerTracer(fx.Tracer):
    """Keeps parameter-owning modules (and parameter-free torch.nn modules) as graph leaves;
    traces through everything else, so every parameter-owning module is one call_module."""

    def __init__(self, layers: set[nn.Module]) -> None:
        super().__init__()
        self.layers = layers

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if m in self.layers:
            return True
        has_params = next(m.parameters(), None) is not None
        return not has_params and super().is_leaf_module(m, module_qualified_name)


def layer_deps(model: nn.Module, index_of: dict[nn.Module, int]) -> list[list[int]]:
    """For each layer (module -> index in `index_of`), the sorted indices of its deps.

    See DEPS_RULE. Traces `model.forward` with torch.fx (in the model's current mode), so the
    forward must be symbolically traceable: no Python control flow on tensor values or
    shapes, no slicing of constant tensors by a symbolic length (use narrow). Raises
    RuntimeError if the trace fails, if a layer does not appear as its own call (e.g. a
    module owning parameters directly that also has parameter-owning children), or if a
    dep's index is not below the layer's own (a module called again after later layers).
    """
    names = {module: name or "(root)" for name, module in model.named_modules()}
    try:
        graph = _LayerTracer(set(index_of)).trace(model)
    except Exception as exc:  # fx raises TraceError, TypeError, ... on untraceable code
        raise RuntimeError(f"torch.fx cannot trace {type(model).__name__}: {exc}") from exc
    param_owner = {
        id(param): module for module in index_of for param in module.parameters(recurse=False)
    }
    deps: list[set[int]] = [set() for _ in index_of]
    seen: set[int] = set()
    sources: dict[fx.Node, frozenset[int]] = {}
    for node in graph.nodes:
        inputs = frozenset().union(*(sources[n] for n in node.all_input_nodes))
        if node.op == "call_module" and model.get_submodule(node.target) in index_of:
            i = index_of[model.get_submodule(node.target)]
            deps[i] |= inputs - {i}
            seen.add(i)
            sources[node] = frozenset({i})
        elif node.op == "get_attr":
            value = _get_attr(model, str(node.target))
            owner = param_owner.get(id(value))
            sources[node] = frozenset() if owner is None else frozenset({index_of[owner]})
        else:
            sources[node] = inputs
    by_index = {i: names[m] for m, i in index_of.items()}
    unseen = [by_index[i] for i in sorted(set(range(len(index_of))) - seen)]
    if unseen:
        raise RuntimeError(
            f"torch.fx does not see {', '.join(unseen)} as module calls (a module that owns "
            "parameters must not also have parameter-owning children)"
        )
    for i, ds in enumerate(deps):
        late = sorted(d for d in ds if d >= i)
        if late:
            raise RuntimeError(
                f"layer {i} ({by_index[i]}) depends on later layer(s) "
                f"{', '.join(by_index[d] for d in late)}: a module reused after them"
            )
    return [sorted(ds) for ds in deps]


def _get_attr(model: nn.Module, target: str) -> Any:
    """The object at dotted path `target` under `model` (a parameter, buffer or constant)."""
    obj: Any = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def profile_layers(
    model: nn.Module, input_shape: tuple[int, ...], input_dtype: str = "float32"
) -> list[dict[str, Any]]:
    """One entry per module that owns parameters directly, in order of first call.

    Runs one eval-mode forward pass of `model` with a batch of 1 zero sample of
    `input_shape` and dtype `input_dtype` ("float32", or "int64" for token ids: 0 is a
    valid id), on the device the model's parameters are on, then a torch.fx trace for the
    `deps` of each entry (see layer_deps). A module called more than once has its FLOPs
    summed; a parameter shared by two modules counts at its first use. Parameter-free
    matmuls run outside the modules count towards the next module called (FLOPS_RULE).
    Raises RuntimeError if a parameter-owning module is never called (its parameters
    would be missing from the layers), or as layer_deps does.
    """
    owners = {
        module: mod_name or "(root)"
        for mod_name, module in model.named_modules()
        if next(module.parameters(recurse=False), None) is not None
    }
    order: list[nn.Module] = []  # first-call order
    flops: dict[nn.Module, int] = {}
    rules: dict[nn.Module, str] = {}
    matmul_flops: dict[nn.Module, int] = {}
    depth = 0  # how many parameter-owning modules are running (nested calls)
    counter = _MatmulCounter(outside=lambda: depth == 0)

    # Pre-hook for the order: a module is "executed" when it starts, which matters for
    # modules that own parameters and also have children.
    def pre_hook(module: nn.Module, args: Any) -> None:
        nonlocal depth
        if module not in flops:
            order.append(module)
            flops[module] = 0
        if counter.pending:  # parameter-free matmuls since the previous module: this one's
            matmul_flops[module] = matmul_flops.get(module, 0) + counter.pending
            counter.pending = 0
        depth += 1

    def post_hook(module: nn.Module, args: Any, output: Any) -> None:
        nonlocal depth
        depth -= 1
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
        sample = torch.zeros((1, *input_shape), dtype=getattr(torch, input_dtype), device=device)
        with torch.no_grad(), counter:
            model(sample)
        if counter.pending and order:  # matmuls after the last module: the last one's
            matmul_flops[order[-1]] = matmul_flops.get(order[-1], 0) + counter.pending
        missing = [owners[m] for m in owners if m not in flops]
        if missing:
            raise RuntimeError(f"forward pass never called {', '.join(missing)}")
        deps = layer_deps(model, {module: i for i, module in enumerate(order)})
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()

    layers = []
    seen: set[int] = set()
    for module, module_deps in zip(order, deps, strict=True):
        params = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for p in params)
        count = sum(p.numel() for p in params)
        extra = matmul_flops.get(module, 0)
        layers.append(
            {
                "name": owners[module],
                "module_type": type(module).__name__,
                "param_count": count,
                "param_bytes": count * BYTES_PER_PARAM,
                "fwd_flops": flops[module] + extra,
                "flops_rule": rules[module] + ("+matmul" if extra else ""),
                "deps": module_deps,
            }
        )
    return layers


def buffer_bytes_by_dtype(model: torch.nn.Module) -> dict[str, int]:
    """The bytes of ``model``'s buffers per dtype (``"float32"``, ``"int64"``), in the order
    the dtypes first appear among ``model.buffers()``."""
    out: dict[str, int] = {}
    for b in model.buffers():
        dtype = str(b.dtype).removeprefix("torch.")
        out[dtype] = out.get(dtype, 0) + b.numel() * b.element_size()
    return out


ACTIVATIONS_RULE = (
    "activation_bytes: the bytes of the tensors autograd saves for the backward pass in one "
    "training forward (train mode, the model's loss from workloads.data.loss_fn on a synthetic "
    "batch), each tensor counted once (a view as its base), the model's parameters and "
    "buffers left out; on the meta device (shapes only). per_sample = (saved(batch 4) - "
    "saved(batch 2)) / 2, fixed = saved(batch 2) - 2 per_sample (batch 2: batch norm needs "
    "more than one value per channel). Not the peak: the backward's "
    "transient gradients and the allocator's slack come on top"
)


def saved_activation_bytes(
    name: str, batch_size: int, device: str = "meta", model: nn.Module | None = None
) -> int:
    """The bytes autograd saves for the backward of one training forward of registered model
    ``name`` (with its loss) at ``batch_size``: each saved tensor once (a view counts as its
    base), the model's parameters and buffers left out. On ``device`` "meta" no memory is
    used and the numbers are the same (only shapes count). ``model``: the model already built
    on ``device`` (else built here)."""
    from workloads import data

    model, inputs, targets = _training_batch(name, batch_size, device, model)
    return saved_bytes(model, lambda: data.loss_fn(name)(model(inputs), targets))


def _training_batch(
    name: str, batch_size: int, device: str, model: nn.Module | None
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """``(model, inputs, targets)`` on ``device`` for one training step of registered model
    ``name`` at ``batch_size``: the model given (else built there) in train mode, the
    synthetic batch copied (not views of the batch's one sequence tensor), the same on every
    device."""
    from workloads import data

    inputs, targets = data.synthetic_batch(name, batch_size, 0, 0, 0)
    inputs, targets = inputs.to(device).clone(), targets.to(device).clone()
    if model is None:
        with torch.device(device):
            model = build_model(name)
    model.train()
    return model, inputs, targets


def saved_bytes(model: nn.Module, forward: Any) -> int:
    """The bytes of the tensors autograd saves while ``forward()`` runs: each once (a view
    counts as its base), ``model``'s parameters and buffers left out."""
    own = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
    saved: dict[int, torch.Tensor] = {}  # keeps each tensor alive, so ids are not reused

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        base = tensor
        while base._base is not None:
            base = base._base
        if id(base) not in own:
            saved[id(base)] = base
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(t.numel() * t.element_size() for t in saved.values())


def activation_bytes(
    name: str, device: str = "meta", model: nn.Module | None = None
) -> dict[str, int]:
    """``{"per_sample": ..., "fixed": ...}``: ``saved_activation_bytes`` as a line in the
    batch size (ACTIVATIONS_RULE), on ``model`` where given."""
    two, four = (saved_activation_bytes(name, batch, device, model) for batch in (2, 4))
    per_sample = (four - two) // 2
    return {"per_sample": per_sample, "fixed": max(0, two - 2 * per_sample)}


STEP_PEAK_RULE = (
    "step_peak_bytes: the most bytes of tensors alive at once beyond the model's parameters "
    "and buffers during one training forward and backward (train mode, the model's loss from "
    "workloads.data.loss_fn on a synthetic batch, no gradients before it): what autograd "
    "saves, the parameters' gradients as the backward makes them and the backward's "
    "transient tensors, each storage counted from the op that makes it until it is freed; on "
    "the meta device (shapes only), at each batch size of batch_sizes (bytes: the peaks). "
    "The peak is the largest of sums that each grow linearly with the batch, so between two "
    "batch sizes the straight line through their peaks is at or above it; beyond the last, "
    "the last two's line goes on. The allocator's slack (glibc's heap on the CPU, PyTorch's "
    "caching allocator on a GPU) comes on top"
)
STEP_PEAK_BATCHES = (2, 4, 8, 16, 32, 64)  # batch norm needs more than one sample


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of the tensors the ops made while it is active that are still alive
    (``now``) and the most alive at once (``peak``): each storage once, from the op that makes
    it until it is freed (a weak reference's finalizer). Tensors made before it, the model's
    weights and the batch, are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # a storage's address -> its bytes
        self.now = 0
        self.peak = 0

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key)

    def _made(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live:  # several outputs of one storage
            return
        size = storage.nbytes()
        self.live[key] = size
        self.now += size
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._freed, key)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        given = {
            leaf.untyped_storage()._cdata
            for leaf in tree_leaves((args, kwargs))
            if isinstance(leaf, torch.Tensor)
        }
        for leaf in tree_leaves(out):
            # a view or an in-place op's result is its input's storage: nothing new (the
            # weights' transposes, say, are the weights)
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage()._cdata not in given:
                self._made(leaf)
        return out


def step_peak_at(
    name: str, batch_size: int, device: str = "meta", model: nn.Module | None = None
) -> int:
    """The most bytes alive at once beyond registered model ``name``'s weights during one
    training forward and backward at ``batch_size`` (STEP_PEAK_RULE). ``model``: the model
    already built on ``device`` (else built here); its gradients are set to None before and
    after."""
    from workloads import data

    model, inputs, targets = _training_batch(name, batch_size, device, model)
    model.zero_grad(set_to_none=True)
    counter = LiveBytes()
    with counter:
        loss = data.loss_fn(name)(model(inputs), targets)
        loss.backward()
        del loss
    model.zero_grad(set_to_none=True)
    return counter.peak


def step_peak_bytes(
    name: str, device: str = "meta", model: nn.Module | None = None
) -> dict[str, list[int]]:
    """``{"batch_sizes": STEP_PEAK_BATCHES, "bytes": [step_peak_at(...) of each]}``
    (STEP_PEAK_RULE), on ``model`` where given."""
    peaks = [step_peak_at(name, batch, device, model) for batch in STEP_PEAK_BATCHES]
    return {"batch_sizes": list(STEP_PEAK_BATCHES), "bytes": peaks}


def profile_model(name: str, device: str = "meta") -> dict[str, Any]:
    """The profile of registered model `name` as a JSON-ready dict, in the file's key order.

    Builds the model on `device` and profiles it with `profile_layers`. The result does
    not depend on `device` (only shapes are used), so "meta" and "cpu" give the same dict.
    """
    spec = get_spec(name)
    with torch.device(device):
        model = build_model(name)
    layers = profile_layers(model, spec.input_shape, spec.input_dtype)
    total = sum(p.numel() for p in model.parameters())
    if total != sum(layer["param_count"] for layer in layers):
        raise RuntimeError(f"{name}: layers do not add up to the model's {total} parameters")
    return {
        "name": name,
        "default_batch_size": spec.default_batch_size,
        "sample_unit": spec.sample_unit,
        "input_shape": list(spec.input_shape),
        "input_dtype": spec.input_dtype,
        "total_param_count": total,
        # The buffers' bytes (batch norm's statistics, position tables) per dtype, in the order
        # the dtypes first appear: what PyTorch's DDP broadcasts before each forward
        # (``broadcast_buffers``), one broadcast per dtype.
        "buffer_bytes_by_dtype": buffer_bytes_by_dtype(model),
        # What autograd keeps for the backward, as a line in the batch size: the bulk of a
        # rank's memory for the large models (``runners.real.launch.preflight`` checks it).
        "activation_bytes": activation_bytes(name, device, model),
        # The most alive at once in a training step beyond the weights: the activations, the
        # gradients and the backward's transients (what the memory checks count).
        "step_peak_bytes": step_peak_bytes(name, device, model),
        "source": {
            "kind": "torch-definition+analytic-flops",
            "model": spec.builder,
            "notes": spec.notes,
            "torch_version": torch.__version__,
            "flops_rule": FLOPS_RULE,
            "deps_rule": DEPS_RULE,
            "activations_rule": ACTIVATIONS_RULE,
            "step_peak_rule": STEP_PEAK_RULE,
            "param_bytes_rule": f"{BYTES_PER_PARAM} bytes per parameter (fp32); a parameter "
            "shared by several modules (tied weights) counts once, at the first that uses it",
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
