"""How much arithmetic a pretraining step does, and what share of the chip's bf16 peak a run reaches (MFU).

The count is of the matrix multiplications only, the convention of Kaplan et al. 2020 (§2.1: a forward pass costs
about 2·N FLOPs per token for N non-embedding parameters, plus 2·n_layer·n_ctx·d_attn for the attention scores)
and of the PaLM paper's model FLOPs utilisation (Chowdhery et al. 2022, Appendix B: 6·N + 12·L·H·Q·T per token for
forward plus backward). For BERT (Devlin et al. 2019, §3) with hidden size D, feed-forward size F, L layers,
batch B, sequence length T, vocabulary V and M masked positions a step (M ≈ 15% of B·T, §3.1):

    per layer   Q, K, V and the output projection   4 · 2·B·T·D²
                the feed-forward block              2 · 2·B·T·D·F
                scores Q·Kᵀ and probabilities · V   2 · 2·B·T²·D
    MLM head    transform (D×D) and decoder (D×V)   2·M·D² + 2·M·D·V   (on the masked positions only, §3.1)
    NSP head    pooler (D×D) and classifier (D×2)   2·B·D² + 2·B·D·2   (§3.2)

The backward pass costs twice the forward (a gradient for the input and one for the weights), so a training step
is 3x the forward count. Embedding lookups, LayerNorm, GELU, softmax and the optimizer are not counted: they are
memory-bound and small next to the matmuls, and leaving them out is what makes the share comparable across codes.

``measured_bf16_peak(device)`` is the denominator: the FLOP/s of a large bf16 matmul timed once per process on
that GPU (cached), not the datasheet number, so the share says how close the step comes to what the chip really
does in this software stack.
"""
from __future__ import annotations

import functools
import time

import torch

from bertcore.config import BertConfig

MLM_FRACTION = 0.15  # BERT §3.1: the share of tokens the masked-LM head sees
PEAK_SIZE = 8192  # the matmul that measures the peak: (8192 x 8192) @ (8192 x 8192) in bf16
PEAK_REPEATS = 10


def forward_flops(config: BertConfig, batch_size: int, seq_len: int, mlm_fraction: float = MLM_FRACTION) -> float:
    """Matmul FLOPs of one forward pass of BertForPreTraining on ``batch_size`` sequences of ``seq_len`` tokens
    (the table in the module docstring)."""
    b, t = float(batch_size), float(seq_len)
    d, f, v = float(config.hidden_size), float(config.intermediate_size), float(config.vocab_size)
    per_layer = 4 * 2 * b * t * d * d + 2 * 2 * b * t * d * f + 2 * 2 * b * t * t * d
    m = mlm_fraction * b * t
    mlm_head = 2 * m * d * d + 2 * m * d * v
    nsp_head = 2 * b * d * d + 2 * b * d * 2
    return config.num_hidden_layers * per_layer + mlm_head + nsp_head


def train_flops_per_step(config: BertConfig, batch_size: int, seq_len: int,
                         mlm_fraction: float = MLM_FRACTION) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward) on a batch of ``batch_size`` x
    ``seq_len``; the numerator of the share of the peak."""
    return 3.0 * forward_flops(config, batch_size, seq_len, mlm_fraction)


def train_flops_per_token(config: BertConfig, seq_len: int, mlm_fraction: float = MLM_FRACTION) -> float:
    """``train_flops_per_step`` per token of a ``seq_len``-token sequence: times tokens/s, the achieved FLOP/s."""
    return train_flops_per_step(config, 1, seq_len, mlm_fraction) / float(seq_len)


@functools.cache
def measured_bf16_peak(device: str) -> float | None:
    """FLOP/s of a (8192 x 8192) @ (8192 x 8192) bf16 matmul on ``device``, the best of PEAK_REPEATS, measured
    once per process (cached). None on the CPU or a GPU without bf16."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_bf16_supported():
        return None
    n = PEAK_SIZE
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):  # warm-up: cuBLAS picks its kernel, the clocks rise
        a @ b
    torch.cuda.synchronize(dev)
    best = float("inf")
    for _ in range(PEAK_REPEATS):
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    del a, b
    return 2.0 * n ** 3 / best


def peak_share(config: BertConfig, seq_len: int, tokens_per_s: float, peak: float | None) -> float | None:
    """The share of ``peak`` FLOP/s that ``tokens_per_s`` tokens a second of training reach (MFU); None without
    a peak or a speed."""
    if not peak or not tokens_per_s or tokens_per_s != tokens_per_s:
        return None
    return train_flops_per_token(config, seq_len) * tokens_per_s / peak


def speed_fields(trainer, row: dict) -> dict[str, str]:
    """What the CLI's progress bar shows after the losses: tokens/s, and on CUDA in bf16 the share of the
    measured bf16 peak (``tok/s="412k", peak="38%"``)."""
    tps = row.get("tokens_per_s")
    if tps is None or not tps == tps:  # NaN: a failed step
        return {}
    out = {"tok/s": f"{tps / 1000:.0f}k" if tps >= 10_000 else f"{tps:.0f}"}
    rt = trainer.runtime
    if rt.precision == "bf16" and rt.torch_device.type == "cuda":
        peak = measured_bf16_peak(rt.device)  # one GPU's; the row counts the tokens of every process
        share = peak_share(trainer.model_config, trainer.config.max_seq_len, tps, peak and peak * rt.world_size)
        if share is not None:
            out["peak"] = f"{100 * share:.0f}%"
    return out
