"""BERT-base encoder (Devlin et al. 2018), shaped like Hugging Face's BertModel with pooler.

12 post-LayerNorm encoder layers, hidden 768, 12 heads, feed-forward 3072 (GELU), vocabulary
30522 (uncased WordPiece), 512 learned positions, 2 token types, LayerNorm eps 1e-12, dropout
0.1. Module names follow BertModel (embeddings.word_embeddings, encoder.layer.N.attention.self.
query, ..., pooler.dense), so the parameter count is exactly BertModel's 109,482,240.

Not included: the pre-training heads (masked-LM transform + tied decoder with its own
30522-element bias, and next-sentence classifier), i.e. this is `BertModel`, not
`BertForPreTraining`. The forward pass assumes unpadded input: every token is attended to
(no attention mask) and all token type ids are 0.
"""

import torch
from torch import nn

from workloads.models.attention import attend


class BertEmbeddings(nn.Module):
    """Word + learned position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, vocab: int, hidden: int, max_pos: int, type_vocab: int, p: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(p)
        # Constant index tensors (buffers, not parameters), cut to the sequence length with
        # narrow() (fx can trace narrow with a symbolic length, not [:T] slicing).
        self.register_buffer("position_ids", torch.arange(max_pos), persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(max_pos, dtype=torch.long), persistent=False
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: (B, T) int64, T <= max_pos
        words = self.word_embeddings(input_ids)  # (B, T, hidden)
        t = input_ids.shape[1]
        positions = self.position_ids.narrow(0, 0, t)  # (T,)
        types = self.token_type_ids.narrow(0, 0, t)  # (T,), all 0
        x = words + self.position_embeddings(positions) + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Q, K, V projections and the attention core (no output projection: BertSelfOutput)."""

    def __init__(self, hidden: int, heads: int, p: float) -> None:
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(p)  # on the attention probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x), self.key(x), self.value(x)  # (B, T, hidden) each
        return attend(q, k, v, self.hidden, self.heads, self.dropout)


class BertOutput(nn.Module):
    """dense -> dropout -> LayerNorm(. + residual): BertSelfOutput and BertOutput alike."""

    def __init__(self, in_features: int, hidden: int, p: float) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, p: float) -> None:
        super().__init__()
        self.self = BertSelfAttention(hidden, heads, p)
        self.output = BertOutput(hidden, hidden, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)
        self.act = nn.GELU()  # exact (erf) GELU, as BERT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class BertLayer(nn.Module):
    """Post-LN encoder layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, hidden: int, heads: int, ffn: int, p: float) -> None:
        super().__init__()
        self.attention = BertAttention(hidden, heads, p)
        self.intermediate = BertIntermediate(hidden, ffn)
        self.output = BertOutput(ffn, hidden, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int, p: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(hidden, heads, ffn, p) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    """tanh(dense(hidden state of the first, [CLS], token))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    """Embeddings, encoder stack, pooler; returns (sequence_output, pooled_output)."""

    def __init__(
        self,
        vocab: int = 30522,
        hidden: int = 768,
        layers: int = 12,
        heads: int = 12,
        ffn: int = 3072,
        max_pos: int = 512,
        type_vocab: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_pos, type_vocab, dropout)
        self.encoder = BertEncoder(layers, hidden, heads, ffn, dropout)
        self.pooler = BertPooler(hidden)

        # BERT's init: N(0, 0.02) weights, zero biases, LayerNorm at identity.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        with torch.no_grad():
            self.embeddings.word_embeddings.weight[0].zero_()  # the [PAD] row

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # input_ids: (B, T) int64
        x = self.encoder(self.embeddings(input_ids))  # (B, T, hidden)
        return x, self.pooler(x)  # (B, T, hidden), (B, hidden)


def bert_base(num_classes: int = 30522) -> BertModel:
    """BERT-base (uncased): 12 layers, 768 hidden, 12 heads; `num_classes` is the vocabulary
    size (BertModel has no classifier; the registry passes the vocabulary through it)."""
    return BertModel(vocab=num_classes)


def bert_base_debug(num_classes: int = 256) -> BertModel:
    """Tiny BertModel for tests: 2 post-LN layers, hidden 64, 4 heads, FFN 256, 64 positions
    (32-token inputs), same modules and names as bert_base; `num_classes` is the vocabulary."""
    return BertModel(vocab=num_classes, hidden=64, layers=2, heads=4, ffn=256, max_pos=64)
