"""The encoder of BERT (Devlin et al. 2019, §3), one module per HF ``modeling_bert`` name, each with its forward.

BertEmbeddings -> BertEncoder = L x BertLayer, and BertLayer = BertAttention (BertSelfAttention, in
``attention.py``, + BertSelfOutput) followed by the FFN (BertIntermediate + BertOutput). Where the LayerNorm sits is ``config.norm_placement``:

    post (BERT, d2l):               x = LN(x + Drop(F(x)))
    pre (codertimo, Annotated):     x = x + Drop(F(LN(x)))
    sublayer_output (the blog):     x = x + LN(Drop(F(x)))

and with ``config.block_dropout`` each block ends in x = Drop(x) (BERT-pytorch's TransformerBlock).

In every placement the two LayerNorms keep their HF names (``attention.output.LayerNorm``, ``output.LayerNorm``),
so HF import and export stay a key-for-key copy.

Every tensor a teacher points at passes through ``tap(name, x)`` (``bertcore.model.tap``): ``embeddings.*``,
``layer.{i}.attention.*``, ``layer.{i}.ffn.*``, ``layer.{i}.output``, ``encoder.output``. With ``tap=None``
nothing is recorded or replaced.

Row subset: ``rows = (slots, valid)`` asks a layer for its output only at ``slots`` (B, M) where ``valid`` (B, M);
keys and values still come from every position, so those rows equal the full computation's. The training path
uses it for the last layer, whose output the losses read only at [CLS] and at the masked positions.

Unpadded batches (``unpad``, ``bertcore.model.fast_path``): the layers take and give (N, D), the real tokens only;
every part but the attention product is per token, so only that sees (B, T, ·). A compiled layer
(``BertLayer.compile_backend``, ``FastPath.compile_layers``) runs the same forward through ``torch.compile``; the
last layer of the loss path (``rows``, whose row count depends on the data) stays eager.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.attention import BertSelfAttention, Dropout, Rows
from bertcore.model.fast_path import Unpadded, compiled
from bertcore.model.functional import activation, layer_norm_unbiased_std, sinusoidal_table
from bertcore.model.tap import Tap, tap_or_none



def take_rows(x: Tensor, rows: Rows | None) -> Tensor:
    """(B, T, D) -> the (N, D) rows named by ``rows`` in (sequence, slot) order; unchanged when rows is None."""
    if rows is None:
        return x
    slots, valid = rows
    return x.gather(1, slots[..., None].expand(-1, -1, x.shape[-1]))[valid]


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
                tap: Tap | None = None, word_embeds: Tensor | None = None) -> Tensor:
        """``word_embeds`` (B, T, D), when given, replaces ``word_embeddings(input_ids)`` (attribution methods
        differentiate with respect to it); scale, positions, segments and the LayerNorm apply as usual."""
        tok = self.word_embeddings(input_ids) if word_embeds is None else word_embeds  # (B, T, D)
        T = tok.shape[1]
        if self.scale != 1.0:
            tok = tok * self.scale
        pos = self.position_table()[:T].unsqueeze(0)  # (1, T, D)
        if tap is not None:
            tok = tap("embeddings.token", tok)
            pos = tap("embeddings.position", pos.expand_as(tok))
        x = tok + pos
        if self.config.type_vocab_size:
            seg = self.token_type_embeddings(self.segment_ids(token_type_ids, attention_mask))  # (B, T, D)
            x = x + tap_or_none(tap, "embeddings.segment", seg)
        x = tap_or_none(tap, "embeddings.sum", x)
        if self.config.embedding_layer_norm:
            x = self.LayerNorm(x)
        if self.dropout is not None:
            x = self.dropout(x)
        return tap_or_none(tap, "embeddings.output", x)


class Residual(nn.Module):
    """dense -> dropout -> residual connection, with the LayerNorm where ``norm_placement`` puts it.

    ``name`` is the tap prefix (``layer.0.attention`` or ``layer.0.ffn``): ``{name}.output`` is the dense output
    before dropout, ``{name}.ln_input`` / ``{name}.ln_output`` what the LayerNorm reads and gives, and
    ``{name}.residual`` the sublayer's result."""

    def __init__(self, config: BertConfig, d_in: int, name: str):
        super().__init__()
        self.placement = config.norm_placement
        self.dense = nn.Linear(d_in, config.hidden_size)
        self.LayerNorm = layer_norm(config)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.name = name

    def norm(self, x: Tensor, tap: Tap | None) -> Tensor:
        if tap is None:
            return self.LayerNorm(x)
        x = tap(f"{self.name}.ln_input", x)
        return tap(f"{self.name}.ln_output", self.LayerNorm(x))

    def normalize_input(self, x: Tensor, tap: Tap | None = None) -> Tensor:
        """The sublayer's input: LN(x) in pre-norm, x otherwise."""
        return self.norm(x, tap) if self.placement == "pre" else x

    def forward(self, h: Tensor, residual: Tensor, tap: Tap | None = None) -> Tensor:
        h = self.dropout(tap_or_none(tap, f"{self.name}.output", self.dense(h)))
        if self.placement == "post":
            return self.norm(h + residual, tap)
        if self.placement == "pre":
            return residual + h
        return residual + self.norm(h, tap)  # sublayer_output


class BertSelfOutput(Residual):
    """Attention output projection W^O, dropout and the residual connection with its LayerNorm."""

    def __init__(self, config: BertConfig, name: str = "attention"):
        super().__init__(config, config.hidden_size, name)


class BertAttention(nn.Module):
    """Self-attention and its residual sublayer; ``{name}.residual`` is the sublayer's result."""

    def __init__(self, config: BertConfig, name: str = "attention"):
        super().__init__()
        self.self = BertSelfAttention(config, name)
        self.output = BertSelfOutput(config, name)
        self.name = name

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                tap: Tap | None = None, rows: Rows | None = None, unpad: Unpadded | None = None) -> Tensor:
        ctx = self.self(self.output.normalize_input(x, tap), mask, head_mask, tap, rows, unpad)  # (B, T, D) or (N, D)
        out = self.output(ctx, take_rows(x if unpad is None or rows is None else unpad.pad(x), rows), tap)
        return tap_or_none(tap, f"{self.name}.residual", out)


class BertIntermediate(nn.Module):
    """act(W1 x + b1), the FFN's first half (Vaswani §3.3); dropout after it if ffn_dropout (codertimo, Annotated)."""

    def __init__(self, config: BertConfig, name: str = "ffn"):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)
        self.dropout = Dropout(config.hidden_dropout_prob) if config.ffn_dropout else None
        self.name = name

    def forward(self, x: Tensor, tap: Tap | None = None) -> Tensor:
        h = self.dense(x)  # (..., F)
        if tap is not None:
            h = tap(f"{self.name}.pre_activation", h)
            h = tap(f"{self.name}.intermediate", self.act(h))
        else:
            h = self.act(h)
        return self.dropout(h) if self.dropout is not None else h


class BertOutput(Residual):
    """W2 h + b2, dropout and the FFN's residual connection with its LayerNorm."""

    def __init__(self, config: BertConfig, name: str = "ffn"):
        super().__init__(config, config.intermediate_size, name)


class BertLayer(nn.Module):
    """One encoder block: self-attention, then the position-wise FFN, each in a residual connection; with
    ``block_dropout`` a dropout of the block's output (BERT-pytorch's TransformerBlock: ``return self.dropout(x)``).
    ``index`` names its tensors ``layer.{index}.*``."""

    def __init__(self, config: BertConfig, index: int = 0):
        super().__init__()
        self.name = f"layer.{index}"
        self.attention = BertAttention(config, f"{self.name}.attention")
        self.intermediate = BertIntermediate(config, f"{self.name}.ffn")
        self.output = BertOutput(config, f"{self.name}.ffn")
        self.dropout = Dropout(config.hidden_dropout_prob) if config.block_dropout else None
        self.compile_backend: str | None = None  # set by BertForPreTraining.set_fast_path

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                tap: Tap | None = None, rows: Rows | None = None, unpad: Unpadded | None = None) -> Tensor:
        if tap is None and rows is None and self.compile_backend is not None:  # rows: a data-dependent shape
            out = compiled(_layer_forward, self.compile_backend)(self, x, mask, head_mask, rows, unpad)
        else:
            out = _layer_forward(self, x, mask, head_mask, rows, unpad, tap)
        return tap_or_none(tap, f"{self.name}.output", out)


def _layer_forward(layer: BertLayer, x: Tensor, mask: Tensor | None, head_mask: Tensor | None, rows: Rows | None,
                   unpad: Unpadded | None, tap: Tap | None = None) -> Tensor:
    """One block's forward up to ``layer.{i}.output`` (a function, so that one compiled copy serves every layer)."""
    h = layer.attention(x, mask, head_mask, tap, rows, unpad)  # (B, T, D) or (N, D)
    out = layer.output(layer.intermediate(layer.output.normalize_input(h, tap), tap), h, tap)
    return layer.dropout(out) if layer.dropout is not None else out


class BertEncoder(nn.Module):
    """L BertLayers, then a final LayerNorm if ``config.final_layer_norm`` (pre-norm stacks need one)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, i) for i in range(config.num_hidden_layers))
        if config.final_layer_norm:
            self.LayerNorm = layer_norm(config)

    def final_norm(self, h: Tensor) -> Tensor:
        """The final LayerNorm of a pre-norm stack (identity without one)."""
        return self.LayerNorm(h) if hasattr(self, "LayerNorm") else h

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                tap: Tap | None = None, last_layer_rows: Rows | None = None, unpad: Unpadded | None = None) -> Tensor:
        """The last hidden state ``encoder.output`` (B, T, D), or (N, D) at ``last_layer_rows``. With ``unpad`` the
        layers run on the real tokens (x (B, T, D) is gathered first) and the output is scattered back to
        (B, T, D), zeros at [PAD]."""
        n = len(self.layer)
        if unpad is not None:
            x = unpad.unpad(x)  # (N, D)
        for i, layer in enumerate(self.layer):
            x = layer(x, mask, None if head_mask is None else head_mask[i], tap, last_layer_rows if i == n - 1 else None,
                      unpad)
        x = self.final_norm(x)
        if unpad is not None and last_layer_rows is None:
            x = unpad.pad(x)
        return tap_or_none(tap, "encoder.output", x)
