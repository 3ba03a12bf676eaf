"""Training data for real runs of the registered models, generated here (nothing downloaded).

Three datasets, every one a pure function of its arguments:

- "synthetic": random inputs of the model's shape and dtype with random targets, fresh for
  every (seed, rank, step): for throughput, where the values do not matter. Any model.
- "shapes": 32x32 RGB images of 10 procedurally drawn shapes (`shapes_dataset`), a fixed
  train/test split; for the 32x32, 10-class debug CNNs only. Learnable: a small CNN gets
  clearly above the 10 % of chance within a few hundred SGD steps.
- "markov": a synthetic language (`markov_dataset`): token sequences from a fixed, sparse,
  random first-order Markov chain, cast into each token model's objective (next tokens,
  translation by a fixed dictionary, masked tokens); a fixed train/test split. Learnable:
  the chain's entropy rate is 0.90 nats per token, against log(256) = 5.55 for guessing
  among the debug models' 256 tokens. Any token model.

Sharding (the contract the multi-process engine and its tests rely on): `batch(..., rank,
world_size, step)` is rank `rank`'s share of step `step`, and the global batch of a step is
the concatenation of the ranks' batches in rank order (`global_batch`). For "shapes" and
"markov" the global batch depends only on the global batch size (batch_size * world_size),
so W ranks of b samples see exactly the samples one process of W * b samples sees, in the
same order; each epoch is a fresh permutation of the train split (seeded by seed and epoch),
the last incomplete global batch of an epoch is dropped. For "synthetic" each rank draws its
own batch from (seed, rank, step).

`loss_fn(model_name)` is the training loss of the model's objective (ModelSpec.objective):
cross entropy over classes, over next tokens, or over the masked tokens and one label per
sequence for BERT.
"""

import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn import functional as F

from workloads.models import ModelSpec, get_spec

Batch = tuple[torch.Tensor, torch.Tensor]

DATASETS = ("synthetic", "shapes", "markov")
IGNORE_INDEX = -100  # a target that the loss skips (masked-lm: unmasked tokens)

SHAPES_CLASSES = (
    "circle", "square", "triangle-up", "triangle-down", "plus",
    "cross", "ring", "diamond", "bar-horizontal", "bar-vertical",
)  # fmt: skip
SHAPES_TRAIN, SHAPES_TEST = 8192, 1024
MARKOV_TRAIN, MARKOV_TEST = 8192, 512
MARKOV_VOCAB = 256  # the language uses ids 1..255 at most; 0 = start / [MASK] token
MARKOV_SUCCESSORS = (0.6, 0.3, 0.1)  # transition probabilities to each token's 3 successors
MASK_FRACTION = 0.15  # masked-lm: share of each sequence's tokens to predict, as in BERT
DATA_SEED = 0  # the datasets' content; a run's seed only orders them


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers: stable across processes, machines and Python versions."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(_mix(*parts))


# --- synthetic ---------------------------------------------------------------------------


def synthetic_batch(model_name: str, batch_size: int, seed: int, rank: int, step: int) -> Batch:
    """Random (inputs, targets) for `model_name`, the same for the same (seed, rank, step).

    Inputs: standard normal float32 images, or token ids uniform in [0, vocabulary).
    Targets as the objective expects (see ModelSpec.objective): uniform labels; for the
    language models the next token of a random sequence; for seq2seq the target row shifted
    right behind start token 0; for masked-lm labels in [0, target_classes) for every token
    and the sequence.
    """
    spec = get_spec(model_name)
    gen = _generator(0, seed, rank, step)
    if spec.objective == "classify":
        inputs = torch.randn((batch_size, *spec.input_shape), generator=gen)
        return inputs, torch.randint(0, spec.num_targets, (batch_size,), generator=gen)
    t = spec.input_shape[-1]
    if spec.objective == "causal-lm":
        ids = torch.randint(0, spec.num_classes, (batch_size, t + 1), generator=gen)
        return ids[:, :-1], ids[:, 1:]
    if spec.objective == "seq2seq":
        ids = torch.randint(0, spec.num_classes, (batch_size, 2, t), generator=gen)
        return _teacher_forced(ids[:, 0], ids[:, 1])
    ids = torch.randint(0, spec.num_classes, (batch_size, t), generator=gen)
    return ids, torch.randint(0, spec.num_targets, (batch_size, t + 1), generator=gen)


def synthetic_batches(
    model_name: str, batch_size: int, seed: int, rank: int = 0, start_step: int = 0
) -> Iterator[Batch]:
    """synthetic_batch of steps start_step, start_step + 1, ... (endless)."""
    step = start_step
    while True:
        yield synthetic_batch(model_name, batch_size, seed, rank, step)
        step += 1


# --- shapes ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def shapes_dataset(seed: int = DATA_SEED) -> tuple[Batch, Batch]:
    """((train images, labels), (test images, labels)): 8192 + 1024 images, uint8 (N, 3, 32,
    32), labels int64 in [0, 10) = index in SHAPES_CLASSES, balanced classes in random order.

    Each image: one filled shape (circle, square, upward or downward triangle, plus, diagonal
    cross, ring, diamond, horizontal or vertical bar) of random size (half-extent 5 to 9
    pixels) at a random position (centre 9.5 to 22.5), in a random colour on a random
    background colour (at least 0.35 apart in every channel), plus grey Gaussian noise (sd
    0.08). Colour carries no information, so a model has to learn the shape. A small CNN
    gets clearly above chance (10 %) in a few hundred steps of SGD: 87 % test accuracy after
    150 steps of 32 images (tests/unit/test_workload_data.py).
    """
    gen = _generator(1, seed)
    n = SHAPES_TRAIN + SHAPES_TEST
    labels = torch.arange(n) % len(SHAPES_CLASSES)
    labels = labels[torch.randperm(n, generator=gen)]
    images = _draw_shapes(labels, gen)
    return (
        (images[:SHAPES_TRAIN], labels[:SHAPES_TRAIN]),
        (images[SHAPES_TRAIN:], labels[SHAPES_TRAIN:]),
    )


def _draw_shapes(labels: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """uint8 (N, 3, 32, 32) images of the shapes `labels` name (see shapes_dataset)."""
    n = len(labels)
    centre = 9.5 + 13 * torch.rand((n, 2, 1, 1), generator=gen)
    radius = 5 + 4 * torch.rand((n, 1, 1), generator=gen)
    pixel = torch.arange(32, dtype=torch.float32) + 0.5
    u = (pixel.view(1, 1, 32) - centre[:, 0]) / radius  # (N, 32, 32), x to the right
    v = (pixel.view(1, 32, 1) - centre[:, 1]) / radius  # y downwards
    mask = torch.zeros((n, 1, 32, 32), dtype=torch.bool)
    for shape in range(len(SHAPES_CLASSES)):
        rows = labels == shape
        mask[rows, 0] = _shape_mask(shape, u[rows], v[rows])
    background = torch.rand((n, 3, 1, 1), generator=gen)
    delta = 0.35 + 0.3 * torch.rand((n, 3, 1, 1), generator=gen)
    foreground = torch.where(background > 0.5, background - delta, background + delta)
    image = torch.where(mask, foreground, background)
    image = image + 0.08 * torch.randn((n, 1, 32, 32), generator=gen)  # grey noise
    return (image.clamp(0, 1) * 255).round().to(torch.uint8)


def _shape_mask(shape: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """bool mask of SHAPES_CLASSES[shape] on pixel coordinates in units of the radius (y
    grows downwards)."""
    au, av, r = u.abs(), v.abs(), torch.sqrt(u * u + v * v)
    ap, aq = (u + v).abs() / math.sqrt(2), (u - v).abs() / math.sqrt(2)  # axes turned 45 deg
    match SHAPES_CLASSES[shape]:
        case "circle":
            return r <= 1
        case "square":
            return (au <= 0.8) & (av <= 0.8)
        case "triangle-up":
            return (av <= 0.8) & (au <= 0.6 * (v + 0.8))
        case "triangle-down":
            return (av <= 0.8) & (au <= 0.6 * (0.8 - v))
        case "plus":
            return ((au <= 0.25) & (av <= 0.9)) | ((av <= 0.25) & (au <= 0.9))
        case "cross":
            return ((ap <= 0.22) & (aq <= 0.95)) | ((aq <= 0.22) & (ap <= 0.95))
        case "ring":
            return (r >= 0.55) & (r <= 1)
        case "diamond":
            return au + av <= 1
        case "bar-horizontal":
            return (au <= 0.95) & (av <= 0.3)
        case _:  # bar-vertical
            return (av <= 0.95) & (au <= 0.3)


def _as_inputs(stored: torch.Tensor) -> torch.Tensor:
    """Stored samples -> model inputs: uint8 images to float32 of about zero mean and unit
    variance; token ids as they are."""
    if stored.dtype == torch.uint8:
        return (stored.float() / 255 - 0.5) / 0.25
    return stored


# --- markov ------------------------------------------------------------------------------


def markov_vocab(spec: ModelSpec) -> int:
    """Ids the language uses for this model: 1 .. markov_vocab - 1 (0 is the start / mask
    token); at most MARKOV_VOCAB, and within the objective's label space."""
    return min(MARKOV_VOCAB, spec.num_classes, spec.num_targets)


@functools.lru_cache(maxsize=4)
def markov_chain(vocab: int, seed: int = DATA_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """(successors (vocab, 3), dictionary (vocab,)): each token 1..vocab-1 is followed by its
    3 distinct successors with probabilities MARKOV_SUCCESSORS (entropy rate 0.90 nats per
    token); the dictionary is a fixed permutation of 1..vocab-1 (the seq2seq "translation").
    Row and entry 0 are unused (0 is no word)."""
    gen = _generator(2, seed, vocab)
    words = vocab - 1
    ranks = torch.rand((vocab, words), generator=gen).argsort(dim=1)[:, : len(MARKOV_SUCCESSORS)]
    dictionary = torch.cat(
        [torch.zeros(1, dtype=torch.long), 1 + torch.randperm(words, generator=gen)]
    )
    return 1 + ranks, dictionary


def _markov_sequences(
    n: int, length: int, vocab: int, seed: int, gen: torch.Generator
) -> torch.Tensor:
    """int64 (n, length) sequences of the chain, first token uniform over 1..vocab-1."""
    successors, _ = markov_chain(vocab, seed)
    cumulative = torch.tensor(MARKOV_SUCCESSORS).cumsum(0)
    choice = torch.searchsorted(cumulative, torch.rand((n, length), generator=gen))
    choice = choice.clamp(max=len(MARKOV_SUCCESSORS) - 1)
    seq = torch.empty((n, length), dtype=torch.long)
    seq[:, 0] = torch.randint(1, vocab, (n,), generator=gen)
    for t in range(1, length):
        seq[:, t] = successors[seq[:, t - 1], choice[:, t]]
    return seq


@functools.lru_cache(maxsize=4)
def markov_dataset(model_name: str, seed: int = DATA_SEED) -> tuple[Batch, Batch]:
    """((train inputs, targets), (test inputs, targets)) of the Markov language for a token
    model (8192 + 512 samples), cast into its objective:

    - causal-lm: inputs (N, T) of a sequence, targets (N, T) its next tokens;
    - seq2seq: a source sentence x and its word-for-word translation y = dictionary[x];
      inputs (N, 2, T) = x and y shifted right behind start token 0, targets y;
    - masked-lm: round(0.15 * T) tokens of each sequence are selected (the same count for
      every sequence, so per-rank mean losses average to the global one) and, as in BERT,
      replaced by 0 ([MASK]) with probability 0.8, by a random token with 0.1, or kept;
      targets (N, T + 1): the original token at the selected positions, IGNORE_INDEX
      elsewhere, and as the sequence label the token that follows the sequence.

    Learnable: next-token entropy 0.90 nats (causal-lm), 0 given the source (seq2seq);
    gpt2-debug gets from 5.55 (chance) to 1.9 nats in 100 SGD steps of 32 sequences
    (tests/unit/test_workload_data.py). masked-lm is slower to start, as attention has to
    learn to look at the neighbours first: bert-base-debug needs about 700 Adam steps.
    """
    spec = get_spec(model_name)
    if spec.input_dtype != "int64":
        raise ValueError(_unsupported(model_name, "markov", "it is for token models"))
    vocab, t = markov_vocab(spec), spec.input_shape[-1]
    gen = _generator(3, seed, vocab, t)
    seq = _markov_sequences(MARKOV_TRAIN + MARKOV_TEST, t + 1, vocab, seed, gen)
    if spec.objective == "causal-lm":
        inputs, targets = seq[:, :-1], seq[:, 1:]
    elif spec.objective == "seq2seq":
        _, dictionary = markov_chain(vocab, seed)
        inputs, targets = _teacher_forced(seq[:, :-1], dictionary[seq[:, :-1]])
    else:
        inputs, targets = _masked(seq, vocab, gen)
    split = MARKOV_TRAIN
    return (inputs[:split], targets[:split]), (inputs[split:], targets[split:])


def _teacher_forced(source: torch.Tensor, target: torch.Tensor) -> Batch:
    """(N, T) source and target -> inputs (N, 2, T) [source; 0 + target[:-1]], targets."""
    shifted = torch.cat([torch.zeros_like(target[:, :1]), target[:, :-1]], dim=1)
    return torch.stack([source, shifted], dim=1), target


def _masked(seq: torch.Tensor, vocab: int, gen: torch.Generator) -> Batch:
    """(N, T + 1) sequences -> masked-lm inputs (N, T) and targets (N, T + 1): BERT's
    corruption of the selected tokens (80 % [MASK], 10 % a random token, 10 % unchanged)."""
    tokens, following = seq[:, :-1], seq[:, -1:]
    n, t = tokens.shape
    count = max(1, round(MASK_FRACTION * t))
    positions = torch.rand((n, t), generator=gen).argsort(dim=1)[:, :count]
    selected = torch.zeros((n, t), dtype=torch.bool).scatter_(1, positions, True)
    fate = torch.rand((n, t), generator=gen)
    random_tokens = torch.randint(1, vocab, (n, t), generator=gen)
    inputs = torch.where(selected & (fate < 0.8), 0, tokens)
    inputs = torch.where(selected & (fate >= 0.8) & (fate < 0.9), random_tokens, inputs)
    labels = tokens.masked_fill(~selected, IGNORE_INDEX)
    return inputs, torch.cat([labels, following], dim=1)


# --- one interface -----------------------------------------------------------------------


def _unsupported(model_name: str, dataset: str, why: str) -> str:
    return f"dataset '{dataset}' does not fit model '{model_name}': {why}"


def _split(model_name: str, dataset: str) -> tuple[Batch, Batch]:
    """(train, test) of a real dataset, as stored (images as uint8: `_as_inputs` makes
    them model inputs); ValueError if the dataset does not fit the model."""
    spec = get_spec(model_name)
    if dataset == "shapes":
        if spec.input_shape != (3, 32, 32) or spec.objective != "classify":
            raise ValueError(
                _unsupported(
                    model_name,
                    dataset,
                    f"it is 3x32x32 images for classifiers, the model takes {spec.input_shape} "
                    "(use 'synthetic', or a -debug CNN)",
                )
            )
        if spec.num_classes < len(SHAPES_CLASSES):
            raise ValueError(_unsupported(model_name, dataset, "it has 10 classes"))
        return shapes_dataset()
    if dataset == "markov":
        return markov_dataset(model_name)
    raise ValueError(f"unknown dataset '{dataset}' (known: {', '.join(DATASETS)})")


@functools.lru_cache(maxsize=8)
def _permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=_generator(4, seed, epoch))


def batch(
    model_name: str, dataset: str, batch_size: int, seed: int, rank: int, world_size: int, step: int
) -> Batch:
    """Rank `rank`'s (inputs, targets) of step `step`: `batch_size` samples, its slice of the
    global batch of batch_size * world_size (see the module docstring)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if batch_size < 1 or step < 0:
        raise ValueError(f"batch_size must be >= 1 and step >= 0, got {batch_size} and {step}")
    if dataset == "synthetic":
        return synthetic_batch(model_name, batch_size, seed, rank, step)
    (inputs, targets), _ = _split(model_name, dataset)
    global_size = batch_size * world_size
    steps_per_epoch = len(inputs) // global_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"global batch {global_size} is larger than the {len(inputs)} training samples of "
            f"'{dataset}'"
        )
    epoch, index = divmod(step, steps_per_epoch)
    start = index * global_size + rank * batch_size
    rows = _permutation(len(inputs), seed, epoch)[start : start + batch_size]
    return _as_inputs(inputs[rows]), targets[rows]


def loader(
    model_name: str,
    dataset: str,
    batch_size: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    start_step: int = 0,
) -> Iterator[Batch]:
    """`batch` of steps start_step, start_step + 1, ... (endless): what the training engine
    iterates on. Checks the combination before the first batch: a dataset that does not fit
    the model raises ValueError naming both."""
    get_spec(model_name)
    if dataset != "synthetic":
        _split(model_name, dataset)
    return _batches(model_name, dataset, batch_size, seed, rank, world_size, start_step)


def _batches(
    model_name: str, dataset: str, b: int, seed: int, rank: int, world_size: int, step: int
) -> Iterator[Batch]:
    while True:
        yield batch(model_name, dataset, b, seed, rank, world_size, step)
        step += 1


def global_batch(
    model_name: str, dataset: str, batch_size: int, seed: int, world_size: int, step: int
) -> Batch:
    """The global batch of step `step`: the ranks' batches concatenated in rank order (what
    single-process SGD on the same data must see)."""
    parts = [
        batch(model_name, dataset, batch_size, seed, r, world_size, step) for r in range(world_size)
    ]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def eval_set(model_name: str, dataset: str) -> Batch:
    """The held-out test split of a real dataset (the same for every seed and rank)."""
    if dataset == "synthetic":
        raise ValueError("dataset 'synthetic' has no test split: its targets are random")
    inputs, targets = _split(model_name, dataset)[1]
    return _as_inputs(inputs), targets


# --- loss --------------------------------------------------------------------------------


def loss_fn(model_name: str) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """loss(model output, targets) -> scalar mean loss, for the model's objective.

    classify: cross entropy of the logits (N, C). causal-lm and seq2seq: cross entropy over
    every token of the logits (N, T, V). masked-lm (BertModel, which has no head): cross
    entropy of the sequence output (N, T, H) read as logits over H labels at the masked
    tokens (IGNORE_INDEX targets skipped), plus that of the pooled output (N, H) against
    the sequence label; so every parameter, the pooler's too, gets a gradient.
    """
    objective = get_spec(model_name).objective
    if objective == "classify":
        return F.cross_entropy
    if objective in ("causal-lm", "seq2seq"):
        return _token_loss
    return _masked_lm_loss


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _masked_lm_loss(
    output: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor
) -> torch.Tensor:
    sequence, pooled = output
    token_loss = F.cross_entropy(
        sequence.flatten(0, 1), targets[:, :-1].flatten(), ignore_index=IGNORE_INDEX
    )
    return token_loss + F.cross_entropy(pooled, targets[:, -1])
