"""The encoder of BERT (Devlin et al. 2019, §3), one module per HF ``modeling_bert`` name, each with its forward.

BertEmbeddings -> BertEncoder = L x BertLayer, and BertLayer = BertAttention (BertSelfAttention + BertSelfOutput)
followed by the FFN (BertIntermediate + BertOutput). Where the LayerNorm sits is ``config.norm_placement``:

    post (BERT, d2l):               x = LN(x + Drop(F(x)))
    pre (codertimo, Annotated):     x = x + Drop(F(LN(x)))
    sublayer_output (the blog):     x = x + LN(Drop(F(x)))

and with ``config.block_dropout`` each block ends in x = Drop(x) (BERT-pytorch's TransformerBlock).

In every placement the two LayerNorms keep their HF names (``attention.output.LayerNorm``, ``output.LayerNorm``),
so HF import and export stay a key-for-key copy.

Row subset: ``rows = (slots, valid)`` asks a layer for its output only at ``slots`` (B, M) where ``valid`` (B, M);
keys and values still come from every position, so those rows equal the full computation's. The training path
uses it for the last layer, whose output the losses read only at [CLS] and at the masked positions.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.functional import activation, dropout, layer_norm_unbiased_std, sinusoidal_table

Rows = tuple[Tensor, Tensor]  # (slots (B, M) long, valid (B, M) bool)


def take_rows(x: Tensor, rows: Rows | None) -> Tensor:
    """(B, T, D) -> the (N, D) rows named by ``rows`` in (sequence, slot) order; unchanged when rows is None."""
    if rows is None:
        return x
    slots, valid = rows
    return x.gather(1, slots[..., None].expand(-1, -1, x.shape[-1]))[valid]


class Dropout(nn.Module):
    """Dropout that draws its mask from ``self.generator`` when one is set (BertForPreTraining.set_dropout_generator)
    so that two trainers in two threads each get the run a solo run with the same seed gets."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.generator)


class UnbiasedStdLayerNorm(nn.Module):
    """a * (x - mean) / (std + eps) + b with the unbiased std, as BERT-pytorch and the Annotated Transformer
    write it; parameters named like nn.LayerNorm's (weight = a, bias = b)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm_unbiased_std(x, self.weight, self.bias, self.eps)


def layer_norm(config: BertConfig) -> nn.Module:
    if config.layer_norm_style == "unbiased_std":
        return UnbiasedStdLayerNorm(config.hidden_size, config.layer_norm_eps)
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)  # Ba et al. 2016, biased variance


class BertEmbeddings(nn.Module):
    """Token (x sqrt(d) if embedding_scale) + position + segment embeddings, then LayerNorm (if
    embedding_layer_norm) and dropout (if embedding_dropout) (BERT §3, Fig. 2; Vaswani §3.4-3.5)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        # padding_idx: a zero [PAD] row that never trains (BERT, BERT-pytorch); a plain row if train_pad_embedding
        pad_row = None if config.train_pad_embedding else config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, d, padding_idx=pad_row)
        if config.position_embedding == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, d)
            # d2l adds pos_embedding.data: the table is saved like any weight but never trained
            self.position_embeddings.weight.requires_grad_(config.train_position_embeddings)
        else:  # fixed table, not trained and not saved: it is a function of the config
            self.register_buffer("sinusoidal", sinusoidal_table(config.max_position_embeddings, d), persistent=False)
        if config.type_vocab_size:
            pad = 0 if config.segment_ids == "1/2" else None  # BERT-pytorch: row 0 = padding, zero and untrained
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d, padding_idx=pad)
        if config.embedding_layer_norm:
            self.LayerNorm = layer_norm(config)
        self.dropout = Dropout(config.hidden_dropout_prob) if config.embedding_dropout else None
        self.scale = math.sqrt(d) if config.embedding_scale else 1.0

    def position_table(self) -> Tensor:
        """(max_position_embeddings, D): the learned weights or the sinusoidal table."""
        if self.config.position_embedding == "learned":
            return self.position_embeddings.weight
        return self.sinusoidal

    def segment_ids(self, token_type_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The rows looked up for 0/1 token types: the same ids, or (tt + 1) * mask for segment_ids=1/2."""
        if self.config.segment_ids == "1/2":
            keep = attention_mask if attention_mask is not None else torch.ones_like(token_type_ids)
            return (token_type_ids + 1) * keep.to(token_type_ids.dtype)
        return token_type_ids

    def forward(self, input_ids: Tensor | None, token_type_ids: Tensor, attention_mask: Tensor | None = None,
                parts: dict | None = None, word_embeds: Tensor | None = None) -> Tensor:
        """``word_embeds`` (B, T, D), when given, replaces ``word_embeddings(input_ids)`` (attribution methods
        differentiate with respect to it); scale, positions, segments and the LayerNorm apply as usual."""
        tok = self.word_embeddings(input_ids) if word_embeds is None else word_embeds  # (B, T, D)
        T = tok.shape[1]
        if self.scale != 1.0:
            tok = tok * self.scale
        pos = self.position_table()[:T].unsqueeze(0)  # (1, T, D)
        x = tok + pos
        if self.config.type_vocab_size:
            seg = self.token_type_embeddings(self.segment_ids(token_type_ids, attention_mask))  # (B, T, D)
            x = x + seg
        else:
            seg = torch.zeros_like(tok)
        normed = self.LayerNorm(x) if self.config.embedding_layer_norm else x
        if parts is not None:
            parts.update(token=tok, position=pos.expand_as(tok), segment=seg, sum=x, normed=normed)
        return self.dropout(normed) if self.dropout is not None else normed


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: softmax(Q K^T / sqrt(d_k)) V per head (Vaswani §3.2.1-3.2.2).

    Runs through ``F.scaled_dot_product_attention`` unless the probabilities are asked for, or attention dropout
    must draw from a private generator; then an explicit softmax runs. The two agree to 1e-5 (tests/test_model.py).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        d = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.dropout = Dropout(config.attention_probs_dropout_prob)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        """(B, T, n*D) -> n tensors (B, H, T, Dh)."""
        B, T, _ = x.shape
        return x.view(B, T, n, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                output_attentions: bool = False, rows: Rows | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D); mask (B, 1, 1, T) bool, True = may attend; head_mask (H,) multiplies each head's
        probabilities. Returns the context (B, T, D), or (N, D) at ``rows``, and the probabilities or None."""
        B, T, D = x.shape
        if rows is None:  # one fused projection instead of three small matmuls (same weights, HF names kept)
            w = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3D, D)
            b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
            q, k, v = self._heads(F.linear(x, w, b), 3)  # each (B, H, T, Dh)
        else:
            slots = rows[0]
            xq = x.gather(1, slots[..., None].expand(-1, -1, D))  # (B, M, D)
            (q,) = self._heads(self.query(xq), 1)  # (B, H, M, Dh)
            w = torch.cat([self.key.weight, self.value.weight])  # (2D, D)
            b = torch.cat([self.key.bias, self.value.bias])
            k, v = self._heads(F.linear(x, w, b), 2)  # each (B, H, T, Dh)
        drop = self.dropout.p if self.training else 0.0
        probs = None
        if not output_attentions and not (drop and self.dropout.generator is not None):
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)  # (B, H, T|M, Dh)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, T|M, T)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)  # rows sum to 1
            if head_mask is not None:  # HF semantics: a masked head's probabilities (and context) become 0
                probs = probs * head_mask[None, :, None, None]
                head_mask = None
            ctx = self.dropout(probs) @ v  # (B, H, T|M, Dh)
        if head_mask is not None:  # (m P) V = m (P V): the SDPA path scales each head's context instead
            ctx = ctx * head_mask[None, :, None, None]
        ctx = ctx.transpose(1, 2).reshape(B, -1, D)  # (B, T|M, D), heads concatenated
        if rows is not None:
            ctx = ctx[rows[1]]  # (N, D)
        return ctx, (probs if output_attentions else None)


class _Residual(nn.Module):
    """dense -> dropout -> residual connection with the LayerNorm where ``norm_placement`` puts it."""

    def __init__(self, config: BertConfig, d_in: int):
        super().__init__()
        self.placement = config.norm_placement
        self.dense = nn.Linear(d_in, config.hidden_size)
        self.LayerNorm = layer_norm(config)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def normalize_input(self, x: Tensor) -> Tensor:
        """The sublayer's input: LN(x) in pre-norm, x otherwise."""
        return self.LayerNorm(x) if self.placement == "pre" else x

    def forward(self, h: Tensor, residual: Tensor) -> Tensor:
        h = self.dropout(self.dense(h))
        if self.placement == "post":
            return self.LayerNorm(h + residual)
        if self.placement == "pre":
            return residual + h
        return residual + self.LayerNorm(h)  # sublayer_output


class BertSelfOutput(_Residual):
    """Attention output projection W^O, dropout and the residual connection with its LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__(config, config.hidden_size)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                output_attentions: bool = False, rows: Rows | None = None,
                context_patch=None) -> tuple[Tensor, Tensor | None]:
        """``context_patch``: a function (B, T, D) -> (B, T, D) applied to the heads' concatenated context before
        W^O (activation patching of single heads, bertcore.analysis.patching); None = the plain forward."""
        ctx, probs = self.self(self.output.normalize_input(x), mask, head_mask, output_attentions, rows)
        if context_patch is not None:
            ctx = context_patch(ctx)
        return self.output(ctx, take_rows(x, rows)), probs  # (B, T, D) or (N, D)


class BertIntermediate(nn.Module):
    """act(W1 x + b1), the FFN's first half (Vaswani §3.3); dropout after it if ffn_dropout (codertimo, Annotated)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)
        self.dropout = Dropout(config.hidden_dropout_prob) if config.ffn_dropout else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.dense(x))  # (..., F)
        return self.dropout(h) if self.dropout is not None else h


class BertOutput(_Residual):
    """W2 h + b2, dropout and the FFN's residual connection with its LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__(config, config.intermediate_size)


class BertLayer(nn.Module):
    """One encoder block: self-attention, then the position-wise FFN, each in a residual connection; with
    ``block_dropout`` a dropout of the block's output (BERT-pytorch's TransformerBlock: ``return self.dropout(x)``)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)
        self.dropout = Dropout(config.hidden_dropout_prob) if config.block_dropout else None

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                output_attentions: bool = False, rows: Rows | None = None,
                context_patch=None) -> tuple[Tensor, Tensor | None]:
        h, probs = self.attention(x, mask, head_mask, output_attentions, rows, context_patch)  # (B, T, D) or (N, D)
        out = self.output(self.intermediate(self.output.normalize_input(h)), h)
        return (self.dropout(out) if self.dropout is not None else out), probs


class BertEncoder(nn.Module):
    """L BertLayers, then a final LayerNorm if ``config.final_layer_norm`` (pre-norm stacks need one)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        if config.final_layer_norm:
            self.LayerNorm = layer_norm(config)

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                output_attentions: bool = False, output_hidden_states: bool = False,
                last_layer_rows: Rows | None = None):
        """Returns (last hidden state (B, T, D), or (N, D) at ``last_layer_rows``; hidden states; attentions)."""
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        n = len(self.layer)
        for i, layer in enumerate(self.layer):
            rows = last_layer_rows if i == n - 1 else None
            x, probs = layer(x, mask, None if head_mask is None else head_mask[i], output_attentions, rows)
            if hidden is not None:
                hidden.append(x)
            if attns is not None:
                attns.append(probs)
        if hasattr(self, "LayerNorm"):
            x = self.LayerNorm(x)
            if hidden is not None:
                hidden[-1] = x
        return x, hidden, attns
