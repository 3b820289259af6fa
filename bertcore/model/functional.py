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
    range, viewed as int16), compared with a threshold: several times cheaper than ``bernoulli_`` with a
    generator (docs/BENCH.md).
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
