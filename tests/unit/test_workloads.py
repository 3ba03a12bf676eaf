"""workloads/: model definitions, stored profiles, profiler CLI, devices."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import workloads
from workloads import devices, measure, profiler
from workloads.__main__ import main
from workloads.models import MODELS, build_model

REPO_ROOT = Path(__file__).resolve().parents[2]

# torchvision.models.resnet50 / vgg16 with 1000 classes, as documented by torchvision.
TORCHVISION_PARAM_COUNTS = {"resnet50": 25_557_032, "vgg16": 138_357_544}
# Reference counts of the newer workloads: torchvision inception_v3(aux_logits=False),
# Hugging Face BertModel (bert-base-uncased, with pooler), GPT-2 small (tied LM head); the
# Transformer base count is our own (37,000 shared vocabulary, tied output projection).
REFERENCE_PARAM_COUNTS = {
    "inception3": 23_834_568,
    "bert-base": 109_482_240,
    "gpt2": 124_439_808,
    "transformer": 63_082_496,
}
ALL_PARAM_COUNTS = TORCHVISION_PARAM_COUNTS | REFERENCE_PARAM_COUNTS
DEBUG_CNNS = ["inception3-debug", "resnet50-debug", "vgg16-debug"]
# Each tiny variant (pinned, so that a change shows) and the full model it shrinks.
DEBUG_PARAM_COUNTS = {
    "resnet50-debug": 130_962,
    "vgg16-debug": 256_690,
    "inception3-debug": 88_458,
    "bert-base-debug": 124_864,
    "transformer-debug": 249_856,
    "gpt2-debug": 118_528,
}


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def meta_model(name: str) -> nn.Module:
    """The model built on torch's meta device: shapes only, no memory, no init cost."""
    with torch.device("meta"):
        return build_model(name)


@pytest.fixture(scope="module")
def full_models() -> dict[str, nn.Module]:
    # Each full model is built once for the whole file (vgg16 is 528 MB of fp32 weights).
    return {name: build_model(name) for name in TORCHVISION_PARAM_COUNTS}


# --- torch definitions -------------------------------------------------------------------


def test_resnet50_has_the_torchvision_parameter_count(full_models):
    assert param_count(full_models["resnet50"]) == 25_557_032


def test_vgg16_has_the_torchvision_parameter_count(full_models):
    assert param_count(full_models["vgg16"]) == 138_357_544


@pytest.mark.parametrize("name", sorted(REFERENCE_PARAM_COUNTS))
def test_new_models_have_their_reference_parameter_counts(name):
    assert param_count(meta_model(name)) == REFERENCE_PARAM_COUNTS[name]


def test_tied_weights_are_one_parameter():
    gpt2, transformer = meta_model("gpt2"), meta_model("transformer")
    assert gpt2.lm_head.weight is gpt2.transformer.wte.weight
    assert transformer.generator.weight is transformer.embed.weight


@pytest.mark.parametrize(
    "name, batch",
    [
        ("inception3", 2),
        ("bert-base", 2),
        ("gpt2", 2),
        ("transformer", 2),
    ],
)
def test_new_models_map_their_input_to_the_documented_output_shape(name, batch):
    spec = MODELS[name]
    dtype = getattr(torch, spec.input_dtype)
    out = meta_model(name)(torch.zeros((batch, *spec.input_shape), dtype=dtype, device="meta"))
    if name == "bert-base":
        sequence, pooled = out
        assert sequence.shape == (batch, 128, 768) and pooled.shape == (batch, 768)
    elif name == "inception3":
        assert out.shape == (batch, 1000)
    else:  # language models: logits over the vocabulary at every target position
        assert out.shape == (batch, spec.input_shape[-1], spec.num_classes)


@pytest.mark.parametrize("name", DEBUG_CNNS)
def test_debug_model_trains_a_step_on_cpu_with_its_input_shape(name):
    torch.manual_seed(0)
    spec = MODELS[name]
    model = build_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(spec.default_batch_size, *spec.input_shape)
    y = torch.randint(0, spec.num_classes, (spec.default_batch_size,))
    logits = model(x)
    assert logits.shape == (spec.default_batch_size, spec.num_classes)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.step()
    assert torch.isfinite(loss)


@pytest.mark.parametrize(
    "name, output_shape",
    [
        ("bert-base-debug", ((3, 32, 64), (3, 64))),  # (sequence output, pooled output)
        ("transformer-debug", (3, 32, 256)),
        ("gpt2-debug", (3, 32, 256)),
    ],
)
def test_debug_token_models_map_their_input_to_the_documented_output_shape(name, output_shape):
    spec = MODELS[name]
    out = meta_model(name)(torch.zeros((3, *spec.input_shape), dtype=torch.long, device="meta"))
    shape = tuple(o.shape for o in out) if isinstance(out, tuple) else out.shape
    assert shape == output_shape


@pytest.mark.parametrize("name", sorted(DEBUG_PARAM_COUNTS))
def test_debug_models_are_tiny_versions_of_their_full_models(name):
    full = name.removesuffix("-debug")
    debug_layers, full_layers = (workloads.load_profile(n).layers for n in (name, full))
    assert param_count(meta_model(name)) == DEBUG_PARAM_COUNTS[name] < 500_000  # < 2 MB
    # Same modules under the same names, fewer blocks: every debug layer exists in the full
    # model, with the same module type.
    full_types = {layer["name"]: layer["module_type"] for layer in raw_layers(full)}
    assert all(full_types[layer["name"]] == layer["module_type"] for layer in raw_layers(name))
    assert {layer.name.split(".")[0] for layer in debug_layers} == {
        layer.name.split(".")[0] for layer in full_layers
    }


def test_inception3_debug_keeps_every_branch_of_inception3():
    # TicTac's order differs from layer order only on DAGs: the debug model keeps the DAG.
    debug, full = (workloads.load_profile(n).layers for n in ("inception3-debug", "inception3"))
    assert [(layer.name, layer.deps) for layer in debug] == [
        (layer.name, layer.deps) for layer in full
    ]


def raw_layers(name: str) -> list[dict]:
    return json.loads((workloads.PROFILES_DIR / f"{name}.json").read_text())["layers"]


def test_every_registered_builder_is_importable_and_named_like_its_model():
    for name, spec in MODELS.items():
        assert spec.name == name
        module_path, func = spec.builder.split(":")
        assert module_path.startswith("workloads.models.")
        assert func


# --- stored profiles ---------------------------------------------------------------------


def test_every_registered_model_has_a_stored_profile():
    assert workloads.names() == sorted(MODELS)


@pytest.mark.parametrize("name", sorted(ALL_PARAM_COUNTS))
def test_stored_profile_has_the_reference_parameter_count(name):
    profile = workloads.load_profile(name)
    assert profile.total_param_count == ALL_PARAM_COUNTS[name]
    assert profile.total_param_bytes == 4 * ALL_PARAM_COUNTS[name]


def test_stored_layer_param_counts_sum_to_the_torch_models_total(full_models):
    for name in workloads.names():
        model = full_models.get(name) or meta_model(name)
        profile = workloads.load_profile(name)
        assert sum(layer.param_count for layer in profile.layers) == param_count(model), name


def test_stored_profiles_are_up_to_date(capsys):
    # The same path CI uses: regenerate in memory, compare byte for byte.
    assert main(["profile", "--all", "--check"]) == 0, capsys.readouterr().err


def test_stored_profiles_match_their_registry_entries():
    for name in workloads.names():
        profile, spec = workloads.load_profile(name), MODELS[name]
        assert profile.name == name
        assert profile.input_shape == spec.input_shape
        assert profile.default_batch_size == spec.default_batch_size
        assert profile.sample_unit == spec.sample_unit
        assert len(profile.sample_unit) <= 32  # the lab catalogue's column
        assert profile.input_dtype == spec.input_dtype
        assert profile.source["model"] == spec.builder
        assert profile.source["notes"] == spec.notes
        assert profile.source["kind"] == "torch-definition+analytic-flops"
        assert profile.source["generated_by"] == f"python -m workloads profile {name}"


@pytest.mark.parametrize(
    "name, first, last",
    [
        ("resnet50", "conv1", "fc"),
        ("resnet50-debug", "conv1", "fc"),
        ("vgg16", "features.0", "classifier.6"),
        ("vgg16-debug", "features.0", "classifier.6"),
        ("inception3", "Conv2d_1a_3x3.conv", "fc"),
        ("bert-base", "embeddings.word_embeddings", "pooler.dense"),
        ("gpt2", "transformer.wte", "lm_head"),
        ("transformer", "embed", "generator"),
        ("inception3-debug", "Conv2d_1a_3x3.conv", "fc"),
        ("bert-base-debug", "embeddings.word_embeddings", "pooler.dense"),
        ("gpt2-debug", "transformer.wte", "lm_head"),
        ("transformer-debug", "embed", "generator"),
    ],
)
def test_layers_start_and_end_where_the_forward_pass_does(name, first, last):
    layers = workloads.load_profile(name).layers
    assert (layers[0].name, layers[-1].name) == (first, last)


def test_resnet50_layers_follow_a_bottleneck_execution_order():
    names = [layer.name for layer in workloads.load_profile("resnet50").layers]
    block = [n.removeprefix("layer1.0.") for n in names if n.startswith("layer1.0.")]
    assert block == [
        "conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "downsample.0", "downsample.1",
    ]  # fmt: skip
    assert len(names) == 107  # 53 convs + 53 batch norms + fc


def test_stored_flops_follow_the_documented_rule():
    # Hand-computed from the rule: 2 * Cin/groups * kh * kw * Cout * Hout * Wout (+bias).
    resnet = {layer.name: layer for layer in workloads.load_profile("resnet50").layers}
    assert resnet["conv1"].fwd_flops == 2 * 3 * 7 * 7 * 64 * 112 * 112
    assert resnet["bn1"].fwd_flops == 2 * 64 * 112 * 112
    assert resnet["fc"].fwd_flops == 2 * 2048 * 1000 + 1000
    vgg = {layer.name: layer for layer in workloads.load_profile("vgg16").layers}
    assert vgg["features.0"].fwd_flops == 2 * 3 * 3 * 3 * 64 * 224 * 224 + 64 * 224 * 224
    assert vgg["classifier.0"].fwd_flops == 2 * 25088 * 4096 + 4096


def test_attention_matmul_flops_are_attributed_to_the_output_projection():
    # QK^T and AV: 2 matmuls of T x T x d MACs each over all heads = 4 * T^2 * d FLOPs.
    bert = {layer.name: layer for layer in workloads.load_profile("bert-base").layers}
    t, d = 128, 768
    dense = bert["encoder.layer.0.attention.output.dense"]
    assert dense.fwd_flops == (2 * d * d * t + d * t) + 4 * t * t * d
    assert bert["encoder.layer.0.attention.self.query"].fwd_flops == 2 * d * d * t + d * t
    assert bert["embeddings.word_embeddings"].fwd_flops == 0  # a lookup
    gpt2 = {layer.name: layer for layer in workloads.load_profile("gpt2").layers}
    t = 1024
    assert gpt2["transformer.h.5.attn.c_proj"].fwd_flops == (2 * d * d + d) * t + 4 * t * t * d
    assert gpt2["lm_head"].fwd_flops == 2 * d * 50257 * t  # tied: no bias
    profile = workloads.load_profile("gpt2")
    assert "attributed to the NEXT parameter-owning module" in profile.source["flops_rule"]


def test_tied_weights_count_once_at_their_first_use():
    gpt2 = {layer.name: layer for layer in workloads.load_profile("gpt2").layers}
    assert gpt2["transformer.wte"].param_count == 50257 * 768
    assert gpt2["lm_head"].param_count == gpt2["lm_head"].param_bytes == 0
    transformer = {layer.name: layer for layer in workloads.load_profile("transformer").layers}
    assert transformer["embed"].param_count == 37000 * 512
    assert transformer["generator"].param_count == 0


def test_layer_counts():
    counts = {name: len(workloads.load_profile(name).layers) for name in ALL_PARAM_COUNTS}
    assert counts == {
        "resnet50": 107,  # 53 convs + 53 batch norms + fc
        "vgg16": 16,  # 13 convs + 3 linear
        "inception3": 189,  # 94 convs + 94 batch norms + fc
        "bert-base": 101,  # 4 embedding + 12 x 8 + pooler
        "gpt2": 76,  # 2 embeddings + 12 x 6 + ln_f + lm_head
        "transformer": 128,  # embed + 6 x 8 + 6 x 13 + generator
    }
    debug = {name: len(workloads.load_profile(name).layers) for name in DEBUG_PARAM_COUNTS}
    assert debug == {
        "resnet50-debug": 35,  # 17 convs + 17 batch norms + fc
        "vgg16-debug": 16,
        "inception3-debug": 189,  # every conv and batch norm of inception3
        "bert-base-debug": 21,  # 4 embedding + 2 x 8 + pooler
        "gpt2-debug": 16,  # 2 embeddings + 2 x 6 + ln_f + lm_head
        "transformer-debug": 44,  # embed + 2 x 8 + 2 x 13 + generator
    }


# --- deps (the forward DAG) --------------------------------------------------------------


def deps_by_name(name: str) -> dict[str, set[str]]:
    layers = workloads.load_profile(name).layers
    return {layer.name: {layers[d].name for d in layer.deps} for layer in layers}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_deps_form_a_dag_in_forward_order_that_reaches_the_last_layer(name):
    layers = workloads.load_profile(name).layers
    assert layers[0].deps == ()
    used: set[int] = set()
    for i, layer in enumerate(layers):
        assert isinstance(layer.deps, tuple)
        assert all(isinstance(d, int) and 0 <= d < i for d in layer.deps), layer.name
        assert len(set(layer.deps)) == len(layer.deps)
        used.update(layer.deps)
    # Every layer but the last feeds a later one: no dangling branch.
    assert used == set(range(len(layers) - 1))


@pytest.mark.parametrize("name", ["vgg16", "vgg16-debug"])
def test_a_chain_model_depends_on_its_previous_layer_only(name):
    layers = workloads.load_profile(name).layers
    assert [layer.deps for layer in layers] == [()] + [(i - 1,) for i in range(1, len(layers))]


def test_resnet50_deps_follow_the_residual_joins():
    deps = deps_by_name("resnet50")
    assert deps["conv1"] == set()
    assert deps["bn1"] == {"conv1"}
    assert deps["layer1.0.bn1"] == {"layer1.0.conv1"}
    # The projection shortcut reads the block input, as the main branch does.
    assert deps["layer1.0.conv1"] == deps["layer1.0.downsample.0"] == {"bn1"}
    # The next block sees main branch + shortcut, added: a join of two layers.
    assert deps["layer1.1.conv1"] == {"layer1.0.bn3", "layer1.0.downsample.1"}
    # An identity shortcut passes the earlier producers through the add.
    assert deps["layer1.2.conv1"] == {"layer1.1.bn3", "layer1.0.bn3", "layer1.0.downsample.1"}
    assert deps["fc"] == {f"layer4.{b}.bn3" for b in range(3)} | {"layer4.0.downsample.1"}
    assert any(len(layer.deps) == 2 for layer in workloads.load_profile("resnet50").layers)


def test_inception3_deps_join_the_branches_of_each_block():
    deps = deps_by_name("inception3")
    mixed_5b_out = {
        f"Mixed_5b.{b}.bn" for b in ("branch1x1", "branch5x5_2", "branch3x3dbl_3", "branch_pool")
    }
    # Every branch of the next block reads the concatenation of the four branches.
    for branch in ("branch1x1", "branch5x5_1", "branch3x3dbl_1", "branch_pool"):
        assert deps[f"Mixed_5c.{branch}.conv"] == mixed_5b_out
    # InceptionE concatenates 6 convs (two of them split pairs).
    assert len(deps["fc"]) == 6
    # A grid reduction passes its input through the max-pool branch.
    assert "Mixed_6e.branch_pool.bn" in deps["Mixed_7b.branch1x1.conv"]
    assert sum(len(d) >= 3 for d in deps.values()) >= 10


def test_transformer_deps_connect_the_encoder_to_every_cross_attention():
    deps = deps_by_name("transformer")
    assert deps["encoder.0.self_attn.q_proj"] == {"embed"}
    assert deps["decoder.0.self_attn.q_proj"] == {"embed"}  # the target lookup
    for layer in range(6):
        for proj in ("k_proj", "v_proj"):
            assert deps[f"decoder.{layer}.cross_attn.{proj}"] == {"encoder.5.norm2"}
        assert deps[f"decoder.{layer}.cross_attn.q_proj"] == {f"decoder.{layer}.norm1"}
    assert deps["encoder.0.self_attn.out_proj"] == {f"encoder.0.self_attn.{p}_proj" for p in "qkv"}


def test_bert_and_gpt2_deps():
    bert = deps_by_name("bert-base")
    assert bert["embeddings.LayerNorm"] == {
        "embeddings.word_embeddings",
        "embeddings.position_embeddings",
        "embeddings.token_type_embeddings",
    }
    assert bert["encoder.layer.0.attention.output.LayerNorm"] == {
        "embeddings.LayerNorm",
        "encoder.layer.0.attention.output.dense",
    }
    gpt2 = deps_by_name("gpt2")
    assert gpt2["lm_head"] == {"transformer.ln_f"}
    # Pre-LN: the residual stream carries every earlier block's outputs to ln_f.
    assert len(gpt2["transformer.ln_f"]) == 2 + 2 * 12


class Diamond(nn.Module):
    """stem -> (left, right) -> add -> relu -> head: a join of two parameter-owning layers."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.left = nn.Linear(4, 4)
        self.right = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        return self.head(torch.relu(self.left(x) + self.right(x)))


def test_profiler_deps_see_through_parameter_free_ops():
    layers = profiler.profile_layers(Diamond(), (4,))
    assert [(layer["name"], layer["deps"]) for layer in layers] == [
        ("stem", []),
        ("left", [0]),
        ("right", [0]),
        ("head", [1, 2]),
    ]


def test_profiler_deps_of_a_module_called_twice_are_the_union_without_itself():
    layers = profiler.profile_layers(DefinedBackwards(), (2, 4, 4))
    assert [layer["deps"] for layer in layers] == [[], [0], [1]]


class ReusedLater(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(self.b(self.a(x)))  # a's second call reads b, which comes after a


def test_profiler_refuses_deps_that_point_forward():
    with pytest.raises(RuntimeError, match=r"layer 0 \(a\) depends on later layer\(s\) b"):
        profiler.profile_layers(ReusedLater(), (3,))


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if y.sum() > 0:  # data-dependent control flow: not traceable
            return self.b(y)
        return y


def test_profiler_explains_an_untraceable_model():
    with pytest.raises(RuntimeError, match="torch.fx cannot trace Branchy"):
        profiler.profile_layers(Branchy(), (3,))


class ParamFreeMatmul(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4, bias=False)
        self.out = nn.Linear(4, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 3, 4)
        h = self.proj(x)
        mixed = torch.softmax(h @ h.transpose(-2, -1), -1) @ h  # (B, 3, 3) then (B, 3, 4)
        return self.out(mixed)


def test_profiler_attributes_parameter_free_matmuls_to_the_next_layer():
    layers = profiler.profile_layers(ParamFreeMatmul(), (3, 4))
    assert layers[0]["fwd_flops"] == 2 * 4 * 4 * 3
    assert layers[0]["flops_rule"] == "linear"
    # (3x4 @ 4x3) + (3x3 @ 3x4) = 36 + 36 MACs.
    assert layers[1]["fwd_flops"] == 2 * 4 * 2 * 3 + 2 * (36 + 36)
    assert layers[1]["flops_rule"] == "linear+matmul"
    assert layers[1]["deps"] == [0]


# --- loader validation -------------------------------------------------------------------


@pytest.fixture
def profiles_dir(tmp_path, monkeypatch):
    """workloads reads its analytic profiles from an empty tmp dir during the test."""
    monkeypatch.setattr(workloads, "PROFILES_DIR", tmp_path)
    workloads.load_profile.cache_clear()
    yield tmp_path
    workloads.load_profile.cache_clear()


def write_profile_with(profiles_dir: Path, name: str, layer: int, deps: object) -> None:
    raw = json.loads((REPO_ROOT / "workloads/profiles" / f"{name}.json").read_text())
    if deps is None:
        del raw["layers"][layer]["deps"]
    else:
        raw["layers"][layer]["deps"] = deps
    (profiles_dir / f"{name}.json").write_text(json.dumps(raw))


@pytest.mark.parametrize(
    "deps, message",
    [
        ([1], r"deps \[1\] out of range \(each must be >= 0 and < its own index 1\)"),
        ([-1], r"deps \[-1\] out of range"),
        ([0, 0], r"repeat an index"),
        (["0"], r"must be a list of integers"),
        (None, r"has no deps \(regenerate: python -m workloads profile vgg16-debug\)"),
    ],
)
def test_loader_rejects_bad_deps_naming_the_profile_and_layer(profiles_dir, deps, message):
    write_profile_with(profiles_dir, "vgg16-debug", 1, deps)
    with pytest.raises(ValueError, match=r"profile 'vgg16-debug' layer 1 \('features.2'\)"):
        workloads.load_profile("vgg16-debug")
    with pytest.raises(ValueError, match=message):
        workloads.load_profile("vgg16-debug")


def test_loader_accepts_the_untouched_profile_from_another_directory(profiles_dir):
    write_profile_with(profiles_dir, "vgg16-debug", 0, [])
    assert workloads.names() == ["vgg16-debug"]
    assert workloads.load_profile("vgg16-debug").layers[1].deps == (0,)


def test_profiles_are_immutable_and_hashable():
    profile = workloads.load_profile("vgg16-debug")
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        profile.source["kind"] = "x"  # type: ignore[index]
    assert hash(profile) == hash(workloads.load_profile("vgg16-debug"))


def test_unknown_workload_raises_a_value_error_naming_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown workload 'nope' \(known: bert-base, bert-base-debug, "
    ):
        workloads.load_profile("nope")
    with pytest.raises(ValueError, match=r"unknown model 'nope'"):
        build_model("nope")


# --- profiler ----------------------------------------------------------------------------


class DefinedBackwards(nn.Module):
    """Defined as head, shared, body; executed as body, shared (twice), head."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4 * 4 * 4, 3)
        self.shared = nn.BatchNorm2d(4)
        self.body = nn.Conv2d(2, 4, kernel_size=3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared(self.shared(self.body(x)))  # (B, 4, 4, 4)
        return self.head(x.flatten(1))


def test_profiler_records_execution_order_not_definition_order():
    layers = profiler.profile_layers(DefinedBackwards(), (2, 4, 4))
    assert [layer["name"] for layer in layers] == ["body", "shared", "head"]
    assert [layer["param_count"] for layer in layers] == [2 * 4 * 9, 8, 64 * 3 + 3]
    assert layers[1]["fwd_flops"] == 2 * (2 * 4 * 4 * 4)  # called twice: summed


def test_profiler_refuses_a_model_with_parameters_the_forward_pass_never_uses():
    model = DefinedBackwards()
    model.unused = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="never called unused"):
        profiler.profile_layers(model, (2, 4, 4))


def test_profiler_marks_modules_it_has_no_rule_for_as_fallback():
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.PReLU(2))
    layers = profiler.profile_layers(model, (1, 3, 3))
    assert layers[1]["flops_rule"] == "fallback"
    assert layers[1]["fwd_flops"] == 2 * (2 * 3 * 3)


@pytest.mark.parametrize("name", sorted(DEBUG_PARAM_COUNTS))
def test_meta_and_cpu_forward_passes_give_the_same_profile(name):
    assert profiler.profile_model(name, device="meta") == profiler.profile_model(name, "cpu")


def test_profiling_twice_writes_identical_files(tmp_path):
    first = profiler.write_profile("resnet50-debug", tmp_path).read_bytes()
    second = profiler.write_profile("resnet50-debug", tmp_path).read_bytes()
    assert first == second
    assert first == (workloads.PROFILES_DIR / "resnet50-debug.json").read_bytes()


def test_check_summarises_a_stale_profile_in_one_line(tmp_path):
    path = profiler.write_profile("vgg16-debug", tmp_path)
    assert profiler.check_profile("vgg16-debug", tmp_path) is None
    path.write_text(path.read_text().replace('"param_count": 224,', '"param_count": 225,'))
    problem = profiler.check_profile("vgg16-debug", tmp_path)
    assert problem == "vgg16-debug: stale profile, 1 field(s) differ: layers[0].param_count"
    path.unlink()
    assert "no stored profile" in profiler.check_profile("vgg16-debug", tmp_path)


# --- measured profiles -------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured_dir(tmp_path_factory) -> Path:
    """One quick real measurement of vgg16-debug on the CPU, written to a tmp dir."""
    directory = tmp_path_factory.mktemp("measured")
    messages: list[str] = []
    measure.write_measured(
        "vgg16-debug",
        device="cpu",
        batch_size=2,
        repeats=2,
        warmup=1,
        label="testbox",
        measured_dir=directory,
        progress=messages.append,
    )
    assert len(messages) == 3
    assert messages[0].startswith("warm-up 1/1: forward ")
    assert messages[2].startswith("repeat 2/2: forward ")
    return directory


def test_measured_profile_round_trip(measured_dir):
    assert workloads.measured_labels("vgg16-debug", measured_dir) == ["testbox"]
    assert workloads.measured_labels("resnet50", measured_dir) == []
    measured = workloads.load_measured("vgg16-debug", "testbox", measured_dir)
    analytic = workloads.load_profile("vgg16-debug")
    assert (measured.workload, measured.label, measured.batch_size) == (
        "vgg16-debug",
        "testbox",
        2,
    )
    assert len(measured.fwd_s) == len(measured.bwd_s) == len(analytic.layers)
    assert all(t > 0 for t in measured.fwd_s + measured.bwd_s)
    assert measured.total_fwd_s == pytest.approx(sum(measured.fwd_s))
    # Every vgg16-debug layer owns parameters: each one's update was timed.
    assert len(measured.update_s) == len(analytic.layers) and all(measured.update_s)
    source = measured.source
    assert source["kind"] == "measured" and source["device"] == "cpu"
    assert source["torch_version"] == torch.__version__
    assert source["repeats"] == 2 and source["warmup"] == 1
    # each timed step whole (forward + backward + updates), at least its layers' medians' scale
    assert len(source["step_s"]) == 2 and all(t > 0 for t in source["step_s"])
    assert max(source["step_s"]) >= 0.5 * (measured.total_fwd_s + sum(measured.bwd_s))
    assert "median" in source["method"] and "NEXT parameter-owning layer" in source["method"]
    assert source["command"] == (
        "python -m workloads profile vgg16-debug --measure --device cpu --batch-size 2 "
        "--repeats 2 --warmup 1 --label testbox"
    )
    assert source["cpu_model"] and source["date"]
    with pytest.raises(TypeError):
        measured.source["kind"] = "x"  # type: ignore[index]
    # The measured/ subfolder is not an analytic profile.
    assert "vgg16-debug@testbox" not in workloads.names()


def edit_measured(measured_dir: Path, tmp_path: Path, edit) -> Path:
    """A copy of the measured file in tmp_path, changed by `edit(raw)`."""
    raw = json.loads((measured_dir / "vgg16-debug@testbox.json").read_text())
    edit(raw)
    (tmp_path / "vgg16-debug@testbox.json").write_text(json.dumps(raw))
    return tmp_path


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda raw: raw["layers"].pop(),
            r"'vgg16-debug@testbox' has 15 layers, the analytic profile 'vgg16-debug' has 16",
        ),
        (
            lambda raw: raw["layers"][3].update(name="features.6"),
            r"layer 3 is 'features.6', the analytic profile's is 'features.7'",
        ),
        (lambda raw: raw["layers"][0].update(bwd_s=-1.0), r"layer 0 \(features.0\): bwd_s = -1"),
        (
            lambda raw: raw["layers"][2].update(update_s="x"),
            r"layer 2 \(features.5\): update_s = 'x'",
        ),
        (lambda raw: raw.update(batch_size=0), r"batch_size must be a positive integer, got 0"),
        (lambda raw: raw.update(workload="vgg16"), r"says it is 'vgg16@testbox' inside"),
    ],
)
def test_measured_loader_rejects_inconsistent_files(measured_dir, tmp_path, edit, message):
    directory = edit_measured(measured_dir, tmp_path, edit)
    with pytest.raises(ValueError, match=message):
        workloads.load_measured("vgg16-debug", "testbox", directory)


def test_a_profile_measured_before_updates_were_timed_has_none(measured_dir, tmp_path):
    def drop(raw):
        for layer in raw["layers"]:
            del layer["update_s"]

    old = workloads.load_measured(
        "vgg16-debug", "testbox", edit_measured(measured_dir, tmp_path, drop)
    )
    assert old.update_s == (0.0,) * len(old.fwd_s)


def test_measured_loader_names_what_is_unknown(measured_dir):
    with pytest.raises(ValueError, match=r"unknown workload 'nope' \(known: "):
        workloads.load_measured("nope", "cpu", measured_dir)
    with pytest.raises(ValueError, match=r"unknown workload 'nope'"):
        workloads.measured_labels("nope", measured_dir)
    with pytest.raises(
        ValueError, match=r"no measured profile 'h100' for workload 'vgg16-debug' \(measured: "
    ):
        workloads.load_measured("vgg16-debug", "h100", measured_dir)
    assert workloads.measured_labels("vgg16-debug", measured_dir / "missing") == []


def test_stored_measured_profiles_load_and_match_their_analytic_profiles():
    stored = {name: workloads.measured_labels(name) for name in workloads.names()}
    assert "cpu" in stored["resnet50"] and "cpu" in stored["vgg16-debug"]
    for name, labels in stored.items():
        for label in labels:
            measured = workloads.load_measured(name, label)
            assert len(measured.fwd_s) == len(workloads.load_profile(name).layers)
            assert measured.source["kind"] == "measured"
            assert measured.source["command"].startswith(f"python -m workloads profile {name} ")
    assert workloads.load_measured("resnet50", "cpu").batch_size == 4


def test_measurement_times_every_layer_of_a_branchy_token_model(tmp_path):
    # A real (tiny) run through the hooks: shared embedding, tied head, cross-attention.
    from workloads.models.transformer import Transformer

    model = Transformer(vocab=50, d_model=16, heads=2, ffn=32, layers=1, max_len=8)
    names = [layer["name"] for layer in profiler.profile_layers(model, (2, 8), "int64")]
    batch = torch.randint(0, 50, (2, 2, 8))
    times = measure.measure_layers(model, names, batch, repeats=1, warmup=0)
    assert len(times["fwd_s"]) == len(times["bwd_s"]) == len(names) == 23
    assert all(t > 0 for t in times["fwd_s"]) and all(t > 0 for t in times["bwd_s"])
    assert sum(times["fwd_s"]) == pytest.approx(times["step_fwd_s"])
    assert sum(times["bwd_s"]) == pytest.approx(times["step_bwd_s"])


def test_the_timed_steps_start_after_the_warm_up_at_the_barrier(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    events: list[str] = []
    measure.measure_layers(
        model,
        ["0", "1"],
        torch.randn(3, 4),
        repeats=2,
        warmup=2,
        progress=lambda message: events.append(message.split(":")[0]),
        before_timed=lambda: events.append("barrier"),
    )
    assert events == ["warm-up 1/2", "warm-up 2/2", "barrier", "repeat 1/2", "repeat 2/2"]


def test_the_collector_is_settled_before_the_timed_steps_and_unfrozen_after():
    """As the real runs' processes before their timed loop: one collection, then what
    survives frozen (a full collection in a timed step scans only what the steps allocate);
    unfrozen after, also when the measurement fails."""
    import gc

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    frozen: list[int] = []
    assert gc.get_freeze_count() == 0
    measure.measure_layers(model, ["0", "1"], torch.randn(3, 4), repeats=1, warmup=1,
                           before_timed=lambda: frozen.append(gc.get_freeze_count()))  # fmt: skip
    assert frozen and frozen[0] > 0
    assert gc.get_freeze_count() == 0

    class Unused(nn.Module):  # a named layer its forward never calls: fails after the freeze
        def __init__(self) -> None:
            super().__init__()
            self.used, self.unused = nn.Linear(4, 2), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    with pytest.raises(ValueError, match="never called unused"):
        measure.measure_layers(Unused(), ["used", "unused"], torch.randn(3, 4), 1, warmup=0)
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a caller that froze its heap itself: its freeze is left to it
    try:
        measure.measure_layers(model, ["0", "1"], torch.randn(3, 4), repeats=1, warmup=1)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_file_barrier_waits_for_every_party_and_says_who_never_came(tmp_path):
    barrier = tmp_path / "b"
    barrier.mkdir()
    (barrier / "another-process.ready").touch()  # the other party, already there
    measure.file_barrier(barrier, 2, timeout_s=5)()  # returns at once
    with pytest.raises(TimeoutError, match=r"2 of 3 processes after 0.05 s"):
        measure.file_barrier(barrier, 3, timeout_s=0.05)()


def test_two_measuring_processes_meet_at_the_barrier(tmp_path):
    args = ["profile", "resnet50-debug", "--measure", "--batch-size", "2", "--repeats", "2"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "workloads", *args, "--label", f"p{k}"]
            + ["--measured-dir", str(tmp_path), "--barrier", f"{tmp_path / 'meet'}:2"],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert len(list((tmp_path / "meet" / "resnet50-debug").glob("*.ready"))) == 2
    for k in range(2):
        assert workloads.load_measured("resnet50-debug", f"p{k}", tmp_path).batch_size == 2


@pytest.mark.parametrize(
    "device_name, label",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Tesla K80", "k80"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ],
)
def test_cuda_device_names_give_short_labels(device_name, label):
    assert measure.cuda_short_name(device_name) == label


# --- CLI ---------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workloads", *args],
        check=False,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_exits_2_and_names_a_bad_model_name():
    result = run_cli("profile", "resnet50", "no-such-model")
    assert result.returncode == 2
    assert "no-such-model" in result.stderr


def test_cli_measure_exits_2_and_names_a_bad_model_name(capsys):
    assert main(["profile", "no-such-model", "--measure"]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cli_measure_on_cuda_without_cuda_exits_2_and_says_what_to_do(capsys, tmp_path):
    code = main(
        ["profile", "vgg16-debug", "--measure", "--device", "cuda", "--measured-dir", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "4"], "--batch-size only go with --measure"),
        (["--measure", "--check"], "--check does not go with --measure"),
        (["--measure", "--device", "meta"], "--measure needs --device cpu or cuda[:N]"),
        (["--measure", "--repeats", "0"], "--repeats must be >= 1"),
        (["--measure", "--label", "a/b"], "--label 'a/b' must be"),
        (["--measure", "--barrier", "dir"], "--barrier 'dir' must be DIR:N"),
        (["--measure", "--barrier", "dir:0"], "--barrier 'dir:0' must be DIR:N"),
        (["--barrier", "dir:2"], "--barrier only go with --measure"),
    ],
)
def test_cli_measure_usage_errors_exit_2(capsys, args, message):
    assert main(["profile", "vgg16-debug", *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_measure_writes_where_told_and_reports_progress_on_stderr(capsys, tmp_path):
    args = ["profile", "resnet50-debug", "--measure", "--batch-size", "2", "--repeats", "1"]
    code = main([*args, "--warmup", "0", "--measured-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    assert out.strip() == str(tmp_path / "resnet50-debug@cpu.json")
    assert "resnet50-debug: repeat 1/1: forward " in err
    assert workloads.load_measured("resnet50-debug", "cpu", tmp_path).batch_size == 2


def test_cli_profile_without_names_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profile"])
    assert exc.value.code == 2


def test_cli_list_prints_every_model_name(capsys):
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == sorted(MODELS)


def test_importing_workloads_does_not_import_torch():
    code = (
        "import sys, workloads, workloads.models, workloads.devices, workloads.__main__; "
        "workloads.load_profile('resnet50'); workloads.load_measured('resnet50', 'cpu'); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- devices -----------------------------------------------------------------------------


def test_devices_carry_their_datasheet_figures():
    assert devices.get_device("v100").peak_fp32_flops == 15.7e12
    assert devices.get_device("a100").peak_fp32_flops == 19.5e12
    assert devices.get_device("a100").peak_tensor_flops == 156e12
    assert devices.get_device("h100").peak_fp32_flops == 67e12
    assert devices.get_device("h100").peak_tensor_flops == 494.7e12
    assert "placeholder" in devices.get_device("cpu-generic").source.lower()
    for device in devices.DEVICES.values():
        assert device.source and device.memory_gb > 0 and device.peak_fp32_flops > 0
        assert device.peak_tensor_flops is None or device.peak_tensor_flops > device.peak_fp32_flops


def test_unknown_device_raises_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown device 'tpu' \(known: a100, "):
        devices.get_device("tpu")


def test_buffer_bytes_are_counted_per_dtype_in_the_order_they_first_appear():
    """What DDP broadcasts before each forward, one broadcast per dtype: batch norm's float32
    statistics (mean and variance) and its int64 counter of batches."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    assert profiler.buffer_bytes_by_dtype(model) == {"float32": 2 * 8 * 4, "int64": 8}
    assert profiler.buffer_bytes_by_dtype(torch.nn.Linear(4, 8)) == {}
    profile = workloads.load_profile("resnet50-debug")
    assert profile.buffers == tuple(
        profiler.buffer_bytes_by_dtype(build_model("resnet50-debug")).items()
    )
    assert profile.buffer_bytes == 9800
