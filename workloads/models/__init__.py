"""Registry of the model definitions behind the workload profiles.

Importing this module does not import torch; only `build_model` does, lazily.
"""

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


OBJECTIVES = ("classify", "causal-lm", "seq2seq", "masked-lm")


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and what a training sample looks like.

    builder: "module.path:function"; called as builder(num_classes=num_classes).
    input_shape: shape of one sample, without the batch dimension.
    num_classes: output classes; for token models the vocabulary size (the model's input is
        token ids in [0, num_classes)).
    default_batch_size: per-worker batch size, in samples.
    sample_unit: what one sample is, for throughput units (e.g. "images"); at most 32
        characters (the lab's catalogue column).
    input_dtype: torch dtype name of the input: "float32" (images) or "int64" (token ids).
    notes: the modelling choices a reader of the profile needs (copied to its source).
    objective: what the forward pass returns and what a training loss compares it with
        (`workloads.data.loss_fn` implements each; none of them adds parameters):
        "classify": logits (N, num_classes) against labels (N,);
        "causal-lm": logits (N, T, num_classes) against the next token of each position (N, T);
        "seq2seq": input (N, 2, T) = source ids, decoder input (the target shifted right
            behind a start token 0); logits (N, T, num_classes) against the target (N, T);
        "masked-lm": BertModel's (sequence output (N, T, H), pooled output (N, H)), each read
            as logits over H = target_classes labels (identity heads: BertModel has no
            pre-training heads), against targets (N, T + 1): a label or -100 (ignored) per
            token, then one label per sequence.
    target_classes: size of the label space when it is not num_classes (masked-lm: the hidden
        size); None: num_classes.
    """

    name: str
    builder: str
    input_shape: tuple[int, ...]
    num_classes: int
    default_batch_size: int
    sample_unit: str
    input_dtype: str = "float32"
    notes: str = ""
    objective: str = "classify"
    target_classes: int | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"model '{self.name}': unknown objective '{self.objective}'")

    @property
    def num_targets(self) -> int:
        """Size of the label space the objective's targets are drawn from."""
        return self.num_classes if self.target_classes is None else self.target_classes


_TV = "torchvision-equivalent (same modules, names and shapes as torchvision.models.{})"
_DEBUG = "tiny same-layout variant for tests: 32x32 input, 10 classes"
_DEBUG_TOKENS = "tiny same-layout variant for tests: 32-token sequences, vocabulary 256"

_SPECS = [
    # Batch size 32 per worker: the usual per-GPU ImageNet batch for these models.
    ModelSpec(
        "resnet50",
        "workloads.models.resnet:resnet50",
        (3, 224, 224),
        1000,
        32,
        "images",
        notes=_TV.format("resnet50") + "; ResNet v1.5, stride on the 3x3 conv",
    ),
    ModelSpec(
        "resnet50-debug",
        "workloads.models.resnet:resnet50_debug",
        (3, 32, 32),
        10,
        8,
        "images",
        notes=_DEBUG + "; one bottleneck per stage, widths 8..64",
    ),
    ModelSpec(
        "vgg16",
        "workloads.models.vgg:vgg16",
        (3, 224, 224),
        1000,
        32,
        "images",
        notes=_TV.format("vgg16") + "; config D, no batch norm",
    ),
    ModelSpec(
        "vgg16-debug",
        "workloads.models.vgg:vgg16_debug",
        (3, 32, 32),
        10,
        8,
        "images",
        notes=_DEBUG + "; config D at 1/8 the channels, 1x1 pool, 128-wide head",
    ),
    # 299x299 as in Szegedy et al. 2016; 32 images per worker as for the other CNNs.
    ModelSpec(
        "inception3",
        "workloads.models.inception:inception3",
        (3, 299, 299),
        1000,
        32,
        "images",
        notes=_TV.format("inception_v3") + " with aux_logits=False: the auxiliary "
        "classifier (training-only, 3,326,696 parameters) is NOT included",
    ),
    ModelSpec(
        "inception3-debug",
        "workloads.models.inception:inception3_debug",
        (3, 32, 32),
        10,
        8,
        "images",
        notes=_DEBUG + "; every block and branch of inception3 (the same layers and DAG) at "
        "1/16 the channels; 32x32 stem: Conv2d_1a_3x3 and maxpool2 with stride 1, so "
        "Mixed_5* run at 11x11, Mixed_6* at 5x5, Mixed_7* at 2x2",
    ),
    # BERT-base pre-training phase-1 / fine-tuning shape: 32 sequences of 128 tokens.
    ModelSpec(
        "bert-base",
        "workloads.models.bert:bert_base",
        (128,),
        30522,  # vocabulary size (input token ids)
        32,
        "sequences of 128 tokens",
        "int64",
        notes="Hugging Face BertModel (with pooler) shape: 12 post-LN layers, hidden 768, "
        "12 heads, FFN 3072, vocab 30522, 512 positions, 2 token types; no pre-training "
        "heads (no masked-LM, no next-sentence head); unpadded input, token types all 0",
        objective="masked-lm",
        target_classes=768,  # the hidden size: the identity heads' label space
    ),
    ModelSpec(
        "bert-base-debug",
        "workloads.models.bert:bert_base_debug",
        (32,),
        256,
        8,
        "sequences of 32 tokens",
        "int64",
        notes=_DEBUG_TOKENS + "; 2 post-LN layers, hidden 64, 4 heads, FFN 256, 64 positions, "
        "2 token types, with pooler; no pre-training heads",
        objective="masked-lm",
        target_classes=64,
    ),
    # One sample = a source and a target sentence, both padded to 128 tokens, stacked as
    # (2, 128) ids. 32 pairs = 4096 tokens per side per worker, the usual per-GPU token budget
    # (Vaswani et al. used ~25,000 source + 25,000 target tokens per batch over 8 GPUs).
    ModelSpec(
        "transformer",
        "workloads.models.transformer:transformer_base",
        (2, 128),
        37000,  # shared source/target BPE vocabulary
        32,
        "sentence pairs of 128 tokens",
        "int64",
        notes="Transformer base (Vaswani et al. 2017): 6+6 post-LN layers, d_model 512, 8 "
        "heads, FFN 2048, sinusoidal positions; shared 37,000-token BPE vocabulary (WMT14 "
        "en-de) with ONE matrix for source embedding, target embedding and pre-softmax "
        "projection (no bias); a sample is (2, 128) ids: source row, target row; "
        "no padding masks",
        objective="seq2seq",
    ),
    ModelSpec(
        "transformer-debug",
        "workloads.models.transformer:transformer_debug",
        (2, 32),
        256,
        8,
        "sentence pairs of 32 tokens",
        "int64",
        notes=_DEBUG_TOKENS + "; 2+2 post-LN layers, d_model 64, 4 heads, FFN 256, "
        "sinusoidal positions, ONE matrix for both embeddings and the output projection; a "
        "sample is (2, 32) ids: source row, target row; no padding masks",
        objective="seq2seq",
    ),
    # GPT-2 small at its full 1024-token context; 8 sequences per worker.
    ModelSpec(
        "gpt2",
        "workloads.models.gpt2:gpt2_small",
        (1024,),
        50257,  # vocabulary size (input token ids and LM-head classes)
        8,
        "sequences of 1024 tokens",
        "int64",
        notes="GPT-2 small (124M): 12 pre-LN blocks, hidden 768, 12 heads, vocab 50257, "
        "context 1024, final LayerNorm, LM head tied to the token embedding (no bias); "
        "causal attention, no padding mask",
        objective="causal-lm",
    ),
    ModelSpec(
        "gpt2-debug",
        "workloads.models.gpt2:gpt2_debug",
        (32,),
        256,
        8,
        "sequences of 32 tokens",
        "int64",
        notes=_DEBUG_TOKENS + "; 2 pre-LN blocks, hidden 64, 4 heads, MLP 256, context 32, "
        "final LayerNorm, LM head tied to the token embedding; causal attention",
        objective="causal-lm",
    ),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}


def get_spec(name: str) -> ModelSpec:
    """The spec for `name`; ValueError naming the known models if there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(sorted(MODELS))})") from None


def build_model(name: str) -> "torch.nn.Module":
    """A freshly initialised model (train mode, default device and dtype) for `name`."""
    spec = get_spec(name)
    module_path, func_name = spec.builder.split(":")
    builder = getattr(importlib.import_module(module_path), func_name)
    return builder(num_classes=spec.num_classes)
