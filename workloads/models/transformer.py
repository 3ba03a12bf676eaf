"""Transformer "base" for machine translation (Vaswani et al. 2017, "Attention Is All You Need").

6 encoder + 6 decoder layers, d_model 512, 8 heads, feed-forward 2048 (ReLU), dropout 0.1,
post-LayerNorm residual blocks (LayerNorm(x + Sublayer(x)), section 3.1; no final
LayerNorm), sinusoidal positional encodings (no parameters), embeddings scaled by
sqrt(d_model).

Vocabulary: one shared source/target BPE vocabulary of 37,000 tokens (the paper's WMT 2014
English-German setup). As in section 3.4, ONE weight matrix serves as source embedding,
target embedding and pre-softmax projection (`generator`, no bias). The parameter count is
63,082,496 (the paper's Table 3 rounds "base" to 65M).

Input: one sample is a (2, T) int64 tensor: row 0 the source ids, row 1 the (shifted) target
ids, both padded to the same T; no padding masks (every position is attended to), causal
mask on the decoder self-attention.

Profiles count the shared matrix once, at its first use (`embed`, the source lookup), so
`generator` is a layer with 0 parameters and the FLOPs of the 512 x 37000 projection.
"""

import math

import torch
from torch import nn

from workloads.models.attention import attend


def sinusoidal_positions(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model)
    )
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe


class MultiHeadAttention(nn.Module):
    """Q/K/V projections of (query, memory), attention core, output projection."""

    def __init__(self, d_model: int, heads: int, p: float) -> None:
        super().__init__()
        self.d_model, self.heads = d_model, heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(p)  # on the attention probabilities

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        # x: (B, T, d) queries; memory: (B, S, d) keys and values (memory is x for self-attn)
        q, k, v = self.q_proj(x), self.k_proj(memory), self.v_proj(memory)
        return self.out_proj(attend(q, k, v, self.d_model, self.heads, self.dropout, mask))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ffn: int, p: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(torch.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: int, p: float) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, p)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn, p)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(p)  # residual dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attn(x, x)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: int, p: float) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, p)
        self.norm1 = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, heads, p)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn, p)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attn(x, x, mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class Transformer(nn.Module):
    """Encoder-decoder with shared embeddings; forward((B, 2, T) ids) -> (B, T, vocab) logits."""

    def __init__(
        self,
        vocab: int = 37000,
        d_model: int = 512,
        heads: int = 8,
        ffn: int = 2048,
        layers: int = 6,
        dropout: float = 0.1,
        max_len: int = 1024,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model), persistent=False)
        self.register_buffer(
            "causal_mask", torch.ones(max_len, max_len, dtype=torch.bool).triu(1), persistent=False
        )
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(d_model, heads, ffn, dropout) for _ in range(layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(d_model, heads, ffn, dropout) for _ in range(layers)
        )
        self.generator = nn.Linear(d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight  # tied: one Parameter for all three uses

        for m in self.modules():
            if isinstance(m, nn.Linear) and m is not self.generator:
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.embed.weight, 0.0, d_model**-0.5)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        # (B, T) ids -> (B, T, d): scaled embedding + positional encoding, dropout
        x = self.embed(ids) * math.sqrt(self.d_model) + self.positions.narrow(0, 0, ids.shape[1])
        return self.dropout(x)

    def forward(self, pair: torch.Tensor) -> torch.Tensor:
        # pair: (B, 2, T) int64; [:, 0] source ids, [:, 1] target ids (teacher forcing)
        src, tgt = pair[:, 0], pair[:, 1]
        memory = self._embed(src)
        for layer in self.encoder:
            memory = layer(memory)  # (B, T, d)
        t = tgt.shape[1]
        mask = self.causal_mask.narrow(0, 0, t).narrow(1, 0, t)
        x = self._embed(tgt)
        for layer in self.decoder:
            x = layer(x, memory, mask)
        return self.generator(x)  # (B, T, vocab)


def transformer_base(num_classes: int = 37000) -> Transformer:
    """Transformer base (6+6 layers, d_model 512, 8 heads, ffn 2048); `num_classes` is the
    shared source/target vocabulary size."""
    return Transformer(vocab=num_classes)


def transformer_debug(num_classes: int = 256) -> Transformer:
    """Tiny Transformer for tests: 2+2 post-LN layers, d_model 64, 4 heads, ffn 256, positions
    up to 64, same modules, names and tied embedding as transformer_base; `num_classes` is
    the shared vocabulary size."""
    return Transformer(vocab=num_classes, d_model=64, heads=4, ffn=256, layers=2, max_len=64)
