"""Pure functions the model is built from: the sinusoidal position table (Vaswani §3.5), dropout
drawn from a private generator, and the activations of BertConfig.hidden_act."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """Vaswani et al. §3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    Returns a float32 tensor of shape (n_positions, d_model). An odd d_model drops the last cosine.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    angle = pos / torch.pow(10000.0, i2 / d_model)  # (P, ceil(d/2))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def dropout(x: Tensor, p: float, training: bool, gen: torch.Generator | None) -> Tensor:
    """Dropout that can draw its mask from a private generator.

    Two trainers in two threads share torch's global RNG; a private generator keeps each one's
    run identical to a solo run with the same seed.
    """
    if not training or p == 0.0:
        return x
    if gen is None:
        return F.dropout(x, p, True)
    return x * _keep_mask(x, p, gen)


def _keep_mask(x: Tensor, p: float, gen: torch.Generator) -> Tensor:
    """Scaled keep mask (0 or 1/(1-p)) shaped like ``x``, drawn from ``gen``.

    16 random bits per element come from one 64-bit draw per 4 elements (``random_`` over the full int64
    range, viewed as int16), compared with a threshold: cheaper than ``bernoulli_`` with a generator
    (docs/BENCH-HISTORY.md, "What made bertcore faster").
    The drop rate is rounded to a multiple of 1/65536 (0.1 -> 0.100006) and the scale uses that exact rate,
    so E[mask] = 1 exactly.
    """
    n = x.numel()
    # random_(-2**63, None) draws the full 64-bit range (plain random_() leaves the top bit 0).
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=gen.device).random_(-(2**63), None, generator=gen)
    bits = bits.view(torch.int16)[:n].to(x.device)
    k = min(65536, max(0, round(p * 65536)))  # dropped values: the k smallest of the 65536 int16 values
    if k >= 65536:
        return torch.zeros_like(x)
    keep = bits.view(x.shape) >= (k - 32768)
    return keep.to(x.dtype).mul_(65536.0 / (65536 - k))


def activation(name: str):
    if name == "gelu":
        return F.gelu  # exact: x * Phi(x), with the erf (BERT)
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")  # 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
    return F.relu


def layer_norm_unbiased_std(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """The seeds' LayerNorm (BERT-pytorch, Annotated Transformer): a * (x - mean) / (std + eps) + b.

    Unlike ``nn.LayerNorm`` (Ba et al. 2016: (x - mean) / sqrt(var + eps) with the biased variance), ``std`` is
    the unbiased (n - 1) standard deviation and eps is added outside the square root.
    """
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)  # unbiased: divides by D - 1
    return weight * (x - mean) / (std + eps) + bias


class _CrossEntropyAndHits(torch.autograd.Function):
    """Mean cross-entropy -log softmax(z)[t] over rows, with the number of rows whose target has the top
    logit. Same value and gradient as ``F.cross_entropy`` (to float rounding), in fewer passes over the
    (N, V) logits: the forward keeps softmax(z) and the backward turns it into softmax(z) - onehot(t) in
    place; the hits compare z_t with the row maximum instead of taking an argmax."""

    @staticmethod
    def forward(ctx, z: Tensor, t: Tensor):
        with torch.autocast(device_type=z.device.type, enabled=False):
            zf = z if z.dtype in (torch.float32, torch.float64) else z.float()
            p = torch.softmax(zf, -1)  # (N, V), one fused pass
            top = zf.amax(-1, keepdim=True)  # (N, 1) the largest logit
            zt = zf.gather(1, t[:, None])  # (N, 1)
            # softmax at the largest logit is exp(0) / sum exp(z - top), so logsumexp(z) = top - log(max p)
            loss = (top - p.amax(-1, keepdim=True).log() - zt).mean()  # logsumexp(z) - z_t
            hits = (zt >= top).sum()
        ctx.save_for_backward(p, t)
        ctx.in_dtype, ctx.spent = z.dtype, False
        ctx.mark_non_differentiable(hits)
        return loss, hits

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_hits):
        if ctx.spent:  # the softmax it kept became the gradient
            raise RuntimeError("cross_entropy_and_hits runs backward once; for a second (retain_graph) use "
                               "F.cross_entropy")
        ctx.spent = True
        p, t = ctx.saved_tensors
        p.scatter_add_(1, t[:, None], torch.full((t.numel(), 1), -1.0, dtype=p.dtype, device=p.device))
        return p.mul_(grad_loss / t.numel()).to(ctx.in_dtype), None  # (softmax - onehot) / N, in place


def cross_entropy_and_hits(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(mean cross-entropy of ``logits`` (N, V) against ``targets`` (N,), number of rows where the target's
    logit is the largest): the MLM loss of BERT §3.1 and its accuracy from one pass. A row counts as a hit
    when its target ties the largest logit too (argmax would pick the first of the tied)."""
    if targets.numel() == 0:
        return logits.sum() * 0.0, torch.zeros((), dtype=torch.long, device=logits.device)
    return _CrossEntropyAndHits.apply(logits, targets)


# Rows of logits handled at once by linear_cross_entropy_and_hits on a CPU: a chunk of CHUNK_ELEMENTS floats
# (rows x V) stays in a core's cache through the softmax and both gradient products.
CHUNK_ELEMENTS = 1 << 19


class _LinearCrossEntropyAndHits(torch.autograd.Function):
    """Mean cross-entropy of z = h W^T + b against t, and the hit count, with the gradients of h, W and b made in
    the same pass over each chunk of rows; the (N, V) logits never exist as a whole. The forward keeps the three
    gradients (N x D, V x D, V: no larger than the inputs) and the backward scales them, in place, by the loss's
    gradient."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, t: Tensor, chunk: int, grads: bool):
        with torch.autocast(device_type=h.device.type, enabled=False):
            w = weight if weight.dtype in (torch.float32, torch.float64) else weight.float()
            x = h.to(w.dtype)
            b = None if bias is None else bias.to(w.dtype)
            n = x.shape[0]
            inv = 1.0 / n
            loss = torch.zeros((), dtype=w.dtype, device=x.device)
            hits = torch.zeros((), dtype=torch.long, device=x.device)
            dx = torch.empty_like(x) if grads else None
            dw = db = None
            for s in range(0, n, chunk):
                xc, tc = x[s:s + chunk], t[s:s + chunk, None]
                z = torch.addmm(b, xc, w.t()) if b is not None else xc @ w.t()  # (c, V)
                top = z.amax(-1, keepdim=True)
                zt = z.gather(1, tc)
                hits += (zt >= top).sum()
                z.sub_(top).exp_()  # exp(z - max): the softmax's numerator, in place
                total = z.sum(-1, keepdim=True)
                loss += (top + total.log() - zt).sum()  # logsumexp(z) - z_t per row
                if grads:  # d loss / d z = (softmax(z) - onehot(t)) / N
                    z.mul_(inv / total).scatter_add_(1, tc, torch.full_like(zt, -inv))
                    torch.mm(z, w, out=dx[s:s + chunk])
                    dw = z.t() @ xc if dw is None else dw.addmm_(z.t(), xc)
                    if b is not None:
                        db = z.sum(0) if db is None else db.add_(z.sum(0))
        ctx.mark_non_differentiable(hits)
        ctx.dtypes, ctx.spent = (h.dtype, weight.dtype, None if bias is None else bias.dtype), False
        ctx.save_for_backward(dx, dw, db)
        return loss * inv, hits

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_hits):
        if ctx.spent:  # the gradients it kept were scaled in place
            raise RuntimeError("linear_cross_entropy_and_hits runs backward once; for a second (retain_graph) use "
                               "F.cross_entropy on F.linear")
        ctx.spent = True
        dx, dw, db = ctx.saved_tensors
        if dx is None:
            raise RuntimeError("linear_cross_entropy_and_hits made no gradients: call it with grad enabled")
        dh_t, dw_t, db_t = ctx.dtypes
        return (dx.mul_(grad_loss).to(dh_t), dw.mul_(grad_loss).to(dw_t),
                None if db is None else db.mul_(grad_loss).to(db_t), None, None, None)


def linear_cross_entropy_and_hits(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                                  chunk: int | None = None) -> tuple[Tensor, Tensor]:
    """``cross_entropy_and_hits(F.linear(h, weight, bias), targets)`` without the (N, V) logits: the MLM decoder
    (BERT §3.1) and its loss over the whole vocabulary, fused. Same value and gradients (to float rounding); the
    work is the same three matrix products, but each chunk of rows goes through the softmax and both gradient
    products while it is in cache, instead of eight passes over an (N, V) matrix in memory. ``chunk``: rows at
    once (default: CHUNK_ELEMENTS / V rows, at least 64, on a CPU; all rows elsewhere). Under autocast (a bf16 run)
    the logits path runs instead, so the decoder keeps autocast's precision."""
    n, v = targets.numel(), weight.shape[0]
    if torch.is_autocast_enabled(h.device.type):
        return cross_entropy_and_hits(F.linear(h, weight, bias), targets)
    if n == 0:
        return (h.sum() + weight.sum()) * 0.0, torch.zeros((), dtype=torch.long, device=h.device)
    if chunk is None:
        chunk = max(64, CHUNK_ELEMENTS // v) if h.device.type == "cpu" else n
    grads = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (h, weight, bias))
    return _LinearCrossEntropyAndHits.apply(h, weight, bias, targets, int(chunk), grads)
