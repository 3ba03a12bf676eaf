"""Scaled dot-product attention written with explicit matmuls, shared by the transformers.

Explicit `@` rather than torch's fused scaled_dot_product_attention, for two reasons: the
profiler sees (and counts the FLOPs of) the two parameter-free matmuls QK^T and AV, and
torch.fx traces it into plain nodes. Numerically it is the textbook formula
softmax(Q K^T / sqrt(d_head) + mask) V of Vaswani et al. 2017.
"""

import math

import torch
from torch import nn

# No Python-level use of tensor shapes below (no `b, t, _ = x.shape`, no math on shapes):
# under torch.fx they are symbolic, so everything shape-dependent stays a tensor op.


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, H*D)."""
    return x.transpose(1, 2).flatten(2)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    dropout: nn.Module,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Multi-head attention core on already-projected q (B, T, E), k and v (B, S, E).

    embed_dim (E) must be divisible by num_heads; scores are scaled by 1/sqrt(E / num_heads).
    mask: bool, broadcastable to (B, H, T, S), True where attention is NOT allowed (e.g. the
    causal upper triangle). `dropout` is applied to the attention probabilities. Returns
    (B, T, E), heads merged, before the output projection.
    """
    scale = 1.0 / math.sqrt(embed_dim // num_heads)
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))  # (B, H, T|S, D)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    probs = dropout(torch.softmax(scores, dim=-1))
    return merge_heads(probs @ v)  # (B, T, E)
