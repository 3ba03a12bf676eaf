"""workloads/data.py: synthetic and generated datasets, sharding by rank, losses."""

import math

import pytest
import torch
from torch import nn

from workloads import data
from workloads.models import MODELS, OBJECTIVES, ModelSpec, build_model

DEBUG_MODELS = sorted(name for name in MODELS if name.endswith("-debug"))
DEBUG_CNNS = [name for name in DEBUG_MODELS if MODELS[name].objective == "classify"]
TOKEN_MODELS = sorted(name for name in MODELS if MODELS[name].input_dtype == "int64")
# Every model with every dataset that fits it.
COMBINATIONS = [(name, "synthetic") for name in sorted(MODELS)]
COMBINATIONS += [(name, "shapes") for name in DEBUG_CNNS]
COMBINATIONS += [(name, "markov") for name in DEBUG_MODELS if name in TOKEN_MODELS]


@pytest.fixture
def one_thread():
    # Two training processes on two cores: more threads than cores slows torch down a lot.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def equal(a: data.Batch, b: data.Batch) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# --- determinism and sharding ------------------------------------------------------------


@pytest.mark.parametrize("name, dataset", COMBINATIONS)
def test_the_same_arguments_give_the_same_batch(name, dataset):
    first = data.batch(name, dataset, 2, seed=3, rank=1, world_size=2, step=5)
    assert equal(first, data.batch(name, dataset, 2, seed=3, rank=1, world_size=2, step=5))


@pytest.mark.parametrize("name, dataset", COMBINATIONS)
def test_ranks_steps_and_seeds_get_different_batches(name, dataset):
    batch = data.batch(name, dataset, 4, seed=0, rank=0, world_size=2, step=0)
    for other in (
        data.batch(name, dataset, 4, seed=0, rank=1, world_size=2, step=0),
        data.batch(name, dataset, 4, seed=0, rank=0, world_size=2, step=1),
        data.batch(name, dataset, 4, seed=1, rank=0, world_size=2, step=0),
    ):
        assert not torch.equal(batch[0], other[0])


@pytest.mark.parametrize("name, dataset", COMBINATIONS)
def test_the_global_batch_is_the_ranks_batches_in_rank_order(name, dataset):
    inputs, targets = data.global_batch(name, dataset, 2, seed=7, world_size=3, step=4)
    for rank in range(3):
        x, y = data.batch(name, dataset, 2, seed=7, rank=rank, world_size=3, step=4)
        assert torch.equal(inputs[2 * rank : 2 * rank + 2], x)
        assert torch.equal(targets[2 * rank : 2 * rank + 2], y)


@pytest.mark.parametrize("name, dataset", [("resnet50-debug", "shapes"), ("gpt2-debug", "markov")])
def test_ranks_of_a_real_dataset_share_what_one_process_of_the_global_batch_sees(name, dataset):
    # 4 ranks x 8 samples and 1 process x 32 samples: the same samples, step by step, over
    # an epoch boundary (8192 / 32 = 256 steps per epoch).
    for step in (0, 1, 255, 256):
        single = data.batch(name, dataset, 32, seed=2, rank=0, world_size=1, step=step)
        assert equal(data.global_batch(name, dataset, 8, seed=2, world_size=4, step=step), single)


def test_an_epoch_visits_every_training_sample_once():
    seen = torch.cat(
        [
            data.global_batch("gpt2-debug", "markov", 1024, seed=0, world_size=2, step=s)[0]
            for s in range(4)
        ]
    )
    train_inputs = data.markov_dataset("gpt2-debug")[0][0]
    assert len(seen) == len(train_inputs) == 8192
    assert torch.equal(seen.unique(dim=0), train_inputs.unique(dim=0))


def test_the_loader_iterates_the_steps_from_its_start_step():
    batches = data.loader("vgg16-debug", "shapes", 4, seed=1, rank=1, world_size=2, start_step=3)
    for step in (3, 4, 5):
        assert equal(next(batches), data.batch("vgg16-debug", "shapes", 4, 1, 1, 2, step))
    synthetic = data.synthetic_batches("gpt2-debug", 2, seed=1, rank=1)
    assert equal(next(synthetic), data.synthetic_batch("gpt2-debug", 2, 1, 1, 0))


# --- shapes and dtypes against the registry ----------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_synthetic_batches_match_the_model_spec(name):
    spec = MODELS[name]
    inputs, targets = data.synthetic_batch(name, 2, seed=0, rank=0, step=0)
    assert inputs.shape == (2, *spec.input_shape)
    assert inputs.dtype == getattr(torch, spec.input_dtype)
    assert targets.dtype == torch.int64
    if spec.input_dtype == "int64":
        assert inputs.min() >= 0 and inputs.max() < spec.num_classes
    t = spec.input_shape[-1]
    expected_targets = {"classify": (2,), "masked-lm": (2, t + 1)}.get(spec.objective, (2, t))
    assert targets.shape == expected_targets
    assert targets.min() >= 0 and targets.max() < spec.num_targets


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_loss_takes_the_models_output_and_its_targets(name):
    # Full models on the meta device: shapes only, no weights.
    spec = MODELS[name]
    inputs, targets = data.synthetic_batch(name, 2, seed=0, rank=0, step=0)
    with torch.device("meta"):
        model = build_model(name)
    loss = data.loss_fn(name)(model(inputs.to("meta")), targets.to("meta"))
    assert loss.shape == ()
    assert spec.objective in OBJECTIVES


@pytest.mark.parametrize("name, dataset", [c for c in COMBINATIONS if c[0] in DEBUG_MODELS])
def test_every_parameter_of_a_debug_model_gets_a_gradient_from_the_loss(name, dataset):
    torch.manual_seed(0)
    model = build_model(name)
    inputs, targets = data.batch(name, dataset, 4, seed=0, rank=0, world_size=1, step=0)
    loss = data.loss_fn(name)(model(inputs), targets)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())


def test_a_global_batch_loss_is_the_mean_of_the_rank_losses():
    # What lets data-parallel SGD (average of the ranks' gradients) equal single-process SGD
    # on the global batch; masked-lm selects the same number of tokens in every sequence.
    for name in ("bert-base-debug", "transformer-debug", "vgg16-debug"):
        torch.manual_seed(0)
        model, loss = build_model(name).eval(), data.loss_fn(name)
        dataset = "shapes" if name == "vgg16-debug" else "markov"
        inputs, targets = data.global_batch(name, dataset, 4, seed=0, world_size=2, step=0)
        with torch.no_grad():
            whole = loss(model(inputs), targets)
            parts = [loss(model(inputs[i : i + 4]), targets[i : i + 4]) for i in (0, 4)]
        assert torch.allclose(whole, sum(parts) / 2, atol=1e-5), name


# --- the generated datasets --------------------------------------------------------------


def test_shapes_is_a_fixed_balanced_split_of_small_images():
    (train_x, train_y), (test_x, test_y) = data.shapes_dataset()
    assert train_x.shape == (8192, 3, 32, 32) and test_x.shape == (1024, 3, 32, 32)
    assert train_x.dtype == torch.uint8
    counts = torch.bincount(torch.cat([train_y, test_y]), minlength=10)
    assert counts.max() - counts.min() <= 1
    inputs, _ = data.eval_set("resnet50-debug", "shapes")
    assert inputs.dtype == torch.float32 and abs(inputs.mean()) < 0.5
    assert 0.5 < inputs.std() < 2


def test_markov_sequences_follow_their_chain():
    successors, dictionary = data.markov_chain(256)
    inputs, targets = data.markov_dataset("gpt2-debug")[0]
    allowed = successors[inputs]  # (N, T, 3)
    assert (allowed == targets.unsqueeze(-1)).any(-1).all()
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    assert sorted(dictionary[1:].tolist()) == list(range(1, 256))
    pairs, translation = data.markov_dataset("transformer-debug")[0]
    assert torch.equal(translation, dictionary[pairs[:, 0]])
    assert torch.equal(pairs[:, 1, 1:], translation[:, :-1]) and (pairs[:, 1, 0] == 0).all()


def test_masked_lm_labels_the_same_number_of_tokens_in_every_sequence():
    inputs, targets = data.markov_dataset("bert-base-debug")[0]
    labelled = (targets[:, :-1] != data.IGNORE_INDEX).sum(1)
    assert (labelled == round(0.15 * 32)).all()
    assert targets.max() < MODELS["bert-base-debug"].num_targets  # 64: its hidden size
    masked = inputs == 0
    assert (targets[:, :-1][masked] != data.IGNORE_INDEX).all()  # [MASK] only where labelled


# --- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, dataset, message",
    [
        ("resnet50", "shapes", r"dataset 'shapes' does not fit model 'resnet50'.*224"),
        ("gpt2-debug", "shapes", r"dataset 'shapes' does not fit model 'gpt2-debug'"),
        ("vgg16-debug", "markov", r"dataset 'markov' does not fit model 'vgg16-debug'"),
        ("vgg16-debug", "imagenet", r"unknown dataset 'imagenet' \(known: synthetic, shapes"),
        ("vgg-17", "synthetic", r"unknown model 'vgg-17'"),
    ],
)
def test_a_dataset_that_does_not_fit_the_model_is_refused_naming_both(name, dataset, message):
    with pytest.raises(ValueError, match=message):
        data.loader(name, dataset, 8, seed=0)


def test_bad_ranks_and_oversized_batches_are_refused():
    with pytest.raises(ValueError, match=r"rank 2 is not in \[0, world_size=2\)"):
        data.batch("vgg16-debug", "synthetic", 8, seed=0, rank=2, world_size=2, step=0)
    with pytest.raises(ValueError, match="global batch 16384 is larger than the 8192"):
        data.batch("vgg16-debug", "shapes", 8192, seed=0, rank=0, world_size=2, step=0)
    with pytest.raises(ValueError, match="'synthetic' has no test split"):
        data.eval_set("vgg16-debug", "synthetic")


# --- learnability ------------------------------------------------------------------------


def tiny_cnn() -> nn.Module:
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, 8), nn.MaxPool2d(2), *block(8, 16), nn.MaxPool2d(2), *block(16, 32),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )  # fmt: skip


def train(model: nn.Module, name: str, dataset: str, steps: int, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = data.loss_fn(name)
    batches = data.loader(name, dataset, 32, seed=0)
    for _ in range(steps):
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()


def test_a_small_cnn_learns_the_shapes_well_above_chance(one_thread):
    torch.manual_seed(0)
    model = tiny_cnn()
    train(model, "resnet50-debug", "shapes", steps=150, lr=0.02)  # 32x32 inputs, 10 classes
    inputs, labels = data.eval_set("resnet50-debug", "shapes")
    with torch.no_grad():
        accuracy = (model.eval()(inputs).argmax(1) == labels).float().mean().item()
    assert accuracy > 0.5  # chance: 0.1; about 0.87 on torch 2.13


def test_gpt2_debug_learns_the_markov_language_well_below_chance(one_thread):
    torch.manual_seed(0)
    model = build_model("gpt2-debug")
    train(model, "gpt2-debug", "markov", steps=100, lr=0.3)
    inputs, targets = data.eval_set("gpt2-debug", "markov")
    with torch.no_grad():
        loss = data.loss_fn("gpt2-debug")(model.eval()(inputs), targets).item()
    # Chance: log(256) = 5.55 nats; the chain's entropy rate: 0.90; about 1.7 here.
    assert loss < 0.5 * math.log(256)


def test_a_model_spec_with_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match=r"model 'x': unknown objective 'regression'"):
        ModelSpec("x", "workloads.models.x:x", (4,), 2, 1, "rows", objective="regression")
