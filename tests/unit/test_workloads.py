"""workloads/: model definitions, stored profiles, profiler CLI, devices."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import workloads
from workloads import devices, profiler
from workloads.__main__ import main
from workloads.models import MODELS, build_model

REPO_ROOT = Path(__file__).resolve().parents[2]

# torchvision.models.resnet50 / vgg16 with 1000 classes, as documented by torchvision.
TORCHVISION_PARAM_COUNTS = {"resnet50": 25_557_032, "vgg16": 138_357_544}
DEBUG_NAMES = ["resnet50-debug", "vgg16-debug"]


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def full_models() -> dict[str, nn.Module]:
    # Each full model is built once for the whole file (vgg16 is 528 MB of fp32 weights).
    return {name: build_model(name) for name in TORCHVISION_PARAM_COUNTS}


# --- torch definitions -------------------------------------------------------------------


def test_resnet50_has_the_torchvision_parameter_count(full_models):
    assert param_count(full_models["resnet50"]) == 25_557_032


def test_vgg16_has_the_torchvision_parameter_count(full_models):
    assert param_count(full_models["vgg16"]) == 138_357_544


@pytest.mark.parametrize("name", DEBUG_NAMES)
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


def test_every_registered_builder_is_importable_and_named_like_its_model():
    for name, spec in MODELS.items():
        assert spec.name == name
        module_path, func = spec.builder.split(":")
        assert module_path.startswith("workloads.models.")
        assert func


# --- stored profiles ---------------------------------------------------------------------


def test_every_registered_model_has_a_stored_profile():
    assert workloads.names() == sorted(MODELS)


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAM_COUNTS))
def test_stored_profile_has_the_torchvision_parameter_count(name):
    profile = workloads.load_profile(name)
    assert profile.total_param_count == TORCHVISION_PARAM_COUNTS[name]
    assert profile.total_param_bytes == 4 * TORCHVISION_PARAM_COUNTS[name]


def test_stored_layer_param_counts_sum_to_the_torch_models_total(full_models):
    for name in workloads.names():
        model = full_models.get(name) or build_model(name)
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
        assert profile.source["model"] == spec.builder
        assert profile.source["kind"] == "torch-definition+analytic-flops"
        assert profile.source["generated_by"] == f"python -m workloads profile {name}"


@pytest.mark.parametrize(
    "name, first, last",
    [
        ("resnet50", "conv1", "fc"),
        ("resnet50-debug", "conv1", "fc"),
        ("vgg16", "features.0", "classifier.6"),
        ("vgg16-debug", "features.0", "classifier.6"),
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


def test_profiles_are_immutable_and_hashable():
    profile = workloads.load_profile("vgg16-debug")
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        profile.source["kind"] = "x"  # type: ignore[index]
    assert hash(profile) == hash(workloads.load_profile("vgg16-debug"))


def test_unknown_workload_raises_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown workload 'nope' \(known: resnet50, "):
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


@pytest.mark.parametrize("name", DEBUG_NAMES)
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
        "workloads.load_profile('resnet50'); "
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
