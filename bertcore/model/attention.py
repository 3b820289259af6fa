"""Multi-head self-attention (Vaswani et al. 2017 §3.2.1-3.2.2; BERT §3), in two paths that agree to 1e-5.

``readable``: the formula, one line per step, each step a named tensor (``bertcore.model.tap``):

    Q = x W_Q + b_Q,  K = x W_K + b_K,  V = x W_V + b_V        split into H heads of d_k = D / H
    scores = Q Kᵀ,  scaled = scores / √d_k,  masked = scaled with padded keys at -inf
    probs = softmax(masked),  context = Dropout(probs) V        heads concatenated -> (B, T, D)

``fast``: the same numbers with the speed tricks that pay where nothing is read: one fused Q/K/V projection,
``F.scaled_dot_product_attention``, and the row subset of the training loss (``rows``: the last layer's output is
needed only at [CLS] and the masked positions; keys and values still come from every position). Attention dropout
drawn from a private generator (per-trainer determinism, every CPU run) needs the probabilities, so it takes an
explicit softmax; without one (``FastPath.fused_dropout``, a GPU run) the dropout runs inside SDPA's fused kernel.
On unpadded batches (``bertcore.model.fast_path.Unpadded``) ``x`` is (N, D), the real tokens only: the projections
run on them and only Q, K, V are scattered back to (B, T, ·) for the attention product.

``head_mask`` (H,) multiplies each head's probabilities (HF semantics: a masked head's context becomes 0).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.fast_path import Unpadded
from bertcore.model.functional import dropout
from bertcore.model.tap import ATTENTION_CORE, Tap

Rows = tuple[Tensor, Tensor]  # (slots (B, M) long, valid (B, M) bool)


class Dropout(nn.Module):
    """Dropout that draws its mask from ``self.generator`` when one is set (BertForPreTraining.set_dropout_generator)
    so that two trainers in two threads each get the run a solo run with the same seed gets."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.generator)


class BertSelfAttention(nn.Module):
    """softmax(Q Kᵀ / √d_k) V for every head; ``name`` is the tap prefix, e.g. ``layer.0.attention``."""

    def __init__(self, config: BertConfig, name: str = "attention"):
        super().__init__()
        d = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.dropout = Dropout(config.attention_probs_dropout_prob)
        self.name = name
        self.names = tuple(f"{name}.{n}" for n in ATTENTION_CORE)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, H*Dh) -> (B, H, T, Dh)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, mask: Tensor | None = None, head_mask: Tensor | None = None,
                tap: Tap | None = None, rows: Rows | None = None, unpad: Unpadded | None = None) -> Tensor:
        """x (B, T, D), or (N, D) with ``unpad``; mask (B, 1, 1, T) bool, True = may attend. Returns the
        concatenated context shaped like x, or (N, D) at ``rows``."""
        if tap is not None and tap.touches(self.names):
            return self.readable(x, mask, head_mask, tap)
        return self.fast(x, mask, head_mask, rows, unpad)

    def readable(self, x: Tensor, mask: Tensor | None, head_mask: Tensor | None, tap: Tap) -> Tensor:
        """The formula step by step, every step through ``tap`` (read or replaced)."""
        B, T, D = x.shape
        n = self.name
        q = tap(f"{n}.query", self.split_heads(self.query(x)))  # (B, H, T, Dh)
        k = tap(f"{n}.key", self.split_heads(self.key(x)))  # (B, H, T, Dh)
        v = tap(f"{n}.value", self.split_heads(self.value(x)))  # (B, H, T, Dh)
        scores = tap(f"{n}.scores", q @ k.transpose(-2, -1))  # (B, H, T, T)
        scaled = tap(f"{n}.scaled", scores / math.sqrt(self.head_dim))
        masked = scaled if mask is None else scaled.masked_fill(~mask, torch.finfo(scaled.dtype).min)
        masked = tap(f"{n}.masked", masked)
        probs = masked.softmax(dim=-1)  # each row sums to 1
        if head_mask is not None:
            probs = probs * head_mask[None, :, None, None]
        probs = tap(f"{n}.probs", probs)
        context = tap(f"{n}.context", self.dropout(probs) @ v)  # (B, H, T, Dh)
        return context.transpose(1, 2).reshape(B, T, D)  # heads concatenated

    def fast(self, x: Tensor, mask: Tensor | None, head_mask: Tensor | None, rows: Rows | None,
             unpad: Unpadded | None = None) -> Tensor:
        D = x.shape[-1]
        B, T = (unpad.B, unpad.T) if unpad is not None else x.shape[:2]
        to_bt = unpad.pad if unpad is not None else (lambda t: t)  # (N, ·) -> (B, T, ·) on an unpadded batch
        qw, kw, vw = self.query.weight, self.key.weight, self.value.weight
        qb, kb, vb = self.query.bias, self.key.bias, self.value.bias
        if rows is None:  # one (3D, D) matmul instead of three
            qkv = to_bt(F.linear(x, torch.cat([qw, kw, vw]), torch.cat([qb, kb, vb])))  # (B, T, 3D)
            q, k, v = qkv.view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        else:  # queries only at the rows asked for
            xq = to_bt(x).gather(1, rows[0][..., None].expand(-1, -1, D))  # (B, M, D)
            q = self.split_heads(F.linear(xq, qw, qb))  # (B, H, M, Dh)
            kv = to_bt(F.linear(x, torch.cat([kw, vw]), torch.cat([kb, vb])))  # (B, T, 2D)
            k, v = kv.view(B, T, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        p = self.dropout.p if self.training else 0.0
        if p and self.dropout.generator is not None:  # the mask must come from the private generator
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            ctx = self.dropout(scores.softmax(dim=-1)) @ v
        else:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, H, T|M, Dh)
        if head_mask is not None:  # (m P) V = m (P V)
            ctx = ctx * head_mask[None, :, None, None]
        ctx = ctx.transpose(1, 2).reshape(B, -1, D)  # (B, T|M, D)
        if rows is not None:
            return ctx[rows[1]]  # (N, D) at rows
        return ctx if unpad is None else unpad.unpad(ctx)
