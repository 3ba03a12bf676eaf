"""Registry of the model definitions behind the workload profiles.

Importing this module does not import torch; only `build_model` does, lazily.
"""

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


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
    """

    name: str
    builder: str
    input_shape: tuple[int, ...]
    num_classes: int
    default_batch_size: int
    sample_unit: str
    input_dtype: str = "float32"
    notes: str = ""


_TV = "torchvision-equivalent (same modules, names and shapes as torchvision.models.{})"
_DEBUG = "tiny same-layout variant for tests: 32x32 input, 10 classes"

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
