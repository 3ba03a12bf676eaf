"""GPT-2 small (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners").

12 pre-LayerNorm decoder blocks, hidden 768, 12 heads, MLP 3072 (tanh-approximated GELU),
vocabulary 50257 (byte-level BPE), 1024 learned positions, final LayerNorm, LayerNorm eps
1e-5, dropout 0.1. The language-model head is tied to the token embedding (same Parameter,
no bias), so the parameter count is GPT-2 small's 124,439,808. Module names follow Hugging
Face's GPT2LMHeadModel (transformer.h.N.attn.c_attn, ...); its Conv1D layers are nn.Linear
here (same parameters, transposed weight layout).

Profiles count a tied parameter once, at its first use (transformer.wte), so `lm_head` is a
layer with 0 parameters whose FLOPs are the full 768 x 50257 projection. Causal
self-attention only: no padding mask.
"""

import math

import torch
from torch import nn

from workloads.models.attention import attend


class CausalSelfAttention(nn.Module):
    """Fused Q/K/V projection (c_attn), causal attention, output projection (c_proj)."""

    def __init__(self, hidden: int, heads: int, p: float) -> None:
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(p)
        self.resid_dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        # x: (B, T, hidden); causal_mask: (T, T) bool, True above the diagonal
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        y = attend(q, k, v, self.hidden, self.heads, self.attn_dropout, causal_mask)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int, p: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(hidden, inner)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(inner, hidden)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LN block: x = x + Attn(LN(x)); x = x + MLP(LN(x))."""

    def __init__(self, hidden: int, heads: int, p: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = CausalSelfAttention(hidden, heads, p)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = MLP(hidden, 4 * hidden, p)

    def forward(self, x: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal_mask)
        return x + self.mlp(self.ln_2(x))


class GPT2Transformer(nn.Module):
    """Token + position embeddings, the blocks, final LayerNorm (HF's GPT2Model)."""

    def __init__(self, vocab: int, ctx: int, hidden: int, layers: int, heads: int, p: float):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(ctx, hidden)
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList(Block(hidden, heads, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        # Constants (buffers, not parameters), cut to the sequence length T <= ctx with narrow()
        # (fx can trace narrow with a symbolic T, not [:T] slicing).
        self.register_buffer("position_ids", torch.arange(ctx), persistent=False)
        self.register_buffer(
            "causal_mask", torch.ones(ctx, ctx, dtype=torch.bool).triu(1), persistent=False
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: (B, T) int64
        t = input_ids.shape[1]
        x = self.drop(
            self.wte(input_ids) + self.wpe(self.position_ids.narrow(0, 0, t))
        )  # (B, T, hidden)
        mask = self.causal_mask.narrow(0, 0, t).narrow(1, 0, t)
        for block in self.h:
            x = block(x, mask)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    """GPT-2 with the tied language-model head; returns logits (B, T, vocab)."""

    def __init__(
        self,
        vocab: int = 50257,
        ctx: int = 1024,
        hidden: int = 768,
        layers: int = 12,
        heads: int = 12,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.transformer = GPT2Transformer(vocab, ctx, hidden, layers, heads, dropout)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one Parameter

        # GPT-2's init: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers).
        for name, m in self.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)) and m is not self.lm_head:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj") else 0.02
                nn.init.normal_(m.weight, 0.0, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(input_ids))  # (B, T, vocab)


def gpt2_small(num_classes: int = 50257) -> GPT2LMHeadModel:
    """GPT-2 small (124M): 12 layers, 768 hidden, 12 heads, 1024 context; `num_classes` is
    the vocabulary size (input ids and output logits)."""
    return GPT2LMHeadModel(vocab=num_classes)


def gpt2_debug(num_classes: int = 256) -> GPT2LMHeadModel:
    """Tiny GPT-2 for tests: 2 pre-LN blocks, hidden 64, 4 heads, MLP 256, context 32, same
    modules, names and tied head as gpt2_small; `num_classes` is the vocabulary size."""
    return GPT2LMHeadModel(vocab=num_classes, ctx=32, hidden=64, layers=2, heads=4)
