"""The numbers a stage of the "Inside the model" page adds to its tensor, computed from the trace and the model's own
weights: a LayerNorm's mean, variance, γ and β for one token (recomputed, and checked against the traced output),
the MLM head's top-k, the NSP probabilities, what the padding mask does to a padded copy of the input (one more
forward pass in eval mode), and one training-mode draw of the attention dropout. No streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertcore.analysis.trace import layer_norm_stats
from bertcore.model.functional import dropout
from bertcore.model.modes import eval_mode


@dataclass
class NormDetail:
    """One token at one LayerNorm (Ba et al. 2016): its input, statistics, parameters and output."""

    x: np.ndarray  # the LayerNorm's input (D,)
    mean: float
    var: float  # the biased variance (nn.LayerNorm), or the unbiased one (n - 1) for the seeds' own LayerNorm
    eps: float
    unbiased: bool  # the seeds' LayerNorm: a (x - mean) / (std + eps) + b with the unbiased std
    gamma: np.ndarray
    beta: np.ndarray
    normalized: np.ndarray  # (x - mean) / sqrt(var + eps), or (x - mean) / (std + eps)
    recomputed: np.ndarray  # gamma * normalized + beta, in float64
    output: np.ndarray  # the model's own output (the trace)

    @property
    def max_diff(self) -> float:
        return float(np.max(np.abs(self.recomputed - self.output))) if self.output.size else 0.0


def norm_site(model, stage_id: str, layer: int):
    """(LayerNorm module, input tensor name, output tensor name) of the stage, or None where it has none."""
    c = model.config
    blk = model.bert.encoder.layer[layer]
    p = f"layer.{layer}."
    if stage_id == "emb_norm" and c.embedding_layer_norm:
        return model.bert.embeddings.LayerNorm, "embeddings.sum", "embeddings.output"
    pre = c.norm_placement == "pre"
    if (stage_id == "attn_norm_before" and pre) or (stage_id == "attn_add_norm" and not pre):
        return blk.attention.output.LayerNorm, p + "attention.ln_input", p + "attention.ln_output"
    if (stage_id == "ffn_norm_before" and pre) or (stage_id == "ffn_add_norm" and not pre):
        return blk.output.LayerNorm, p + "ffn.ln_input", p + "ffn.ln_output"
    if stage_id == "next_layer" and c.final_layer_norm and layer == c.num_hidden_layers - 1:
        return model.bert.encoder.LayerNorm, p + "output", "encoder.output"
    return None


def norm_detail(model, t, stage_id: str, layer: int, token: int) -> NormDetail | None:
    site = norm_site(model, stage_id, layer)
    if site is None or site[1] not in t.tensors or site[2] not in t.tensors:
        return None
    ln, src, dst = site
    unbiased = model.config.layer_norm_style == "unbiased_std"
    x = np.asarray(t.tensors[src][token], dtype=np.float64)
    mean, var = (float(v) for v in layer_norm_stats(x, unbiased=unbiased))
    eps = float(ln.eps)
    gamma = ln.weight.detach().double().numpy()
    beta = ln.bias.detach().double().numpy()
    norm = (x - mean) / (np.sqrt(var) + eps if unbiased else np.sqrt(var + eps))
    return NormDetail(x, mean, var, eps, unbiased, gamma, beta, norm, gamma * norm + beta,
                      np.asarray(t.tensors[dst][token], dtype=np.float64))


def softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mlm_positions(t, tokenizer, token: int) -> tuple[list[int], bool]:
    """The [MASK] positions of the input, or ``[token]`` when it has none (second value False)."""
    mask = getattr(tokenizer, "mask_token", "[MASK]")
    found = [i for i, tok in enumerate(t.tokens) if tok == mask]
    return (found, True) if found else ([token], False)


def mlm_top(t, tokenizer, positions: list[int], k: int = 5) -> list[dict]:
    """The top-k words of the MLM head at each position: rows {position, rank, token, prob, logit}."""
    logits = np.asarray(t.tensors["mlm.logits"], dtype=np.float64)
    rows = []
    for pos in positions:
        p = softmax(logits[pos])
        top = np.argsort(-logits[pos], kind="stable")[:k]
        words = tokenizer.convert_ids_to_tokens([int(i) for i in top])
        rows += [{"position": pos, "rank": r + 1, "token": str(w), "prob": float(p[i]), "logit": float(logits[pos, i])}
                 for r, (i, w) in enumerate(zip(top, words))]
    return rows


def nsp_probs(t) -> np.ndarray | None:
    """softmax of the NSP logits: [P(IsNext), P(NotNext)] (label 0 = IsNext, as in transformers)."""
    z = t.tensors.get("nsp.logits")
    return None if z is None else softmax(np.asarray(z).reshape(-1))


def padded_attention(model, t, layer: int, n_pad: int = 2) -> dict | None:
    """The same input with ``n_pad`` [PAD] tokens appended and an attention mask that marks them, as a batch pads a
    shorter example: layer ``layer``'s scaled scores, masked scores and softmax, (H, T + n_pad, T + n_pad) each.
    One forward pass in eval mode. None when the padded input would not fit the position table."""
    T = len(t.input_ids)
    if T + n_pad > int(model.config.max_position_embeddings):
        return None
    pad = int(model.config.pad_token_id)
    ids = torch.tensor([list(t.input_ids) + [pad] * n_pad])
    types = torch.tensor([list(t.segment_ids) + [0] * n_pad])
    mask = torch.tensor([[1] * T + [0] * n_pad])
    names = [f"layer.{layer}.attention.{n}" for n in ("scaled", "masked", "probs")]
    with eval_mode(model):
        _, cache = model.run_with_cache(ids, types, mask, names=names)
    out = {k: cache[n][0].double().numpy() for k, n in zip(("scaled", "masked", "probs"), names)}
    return {**out, "n_pad": n_pad}


def dropout_draw(row: np.ndarray, p: float, seed: int = 0) -> np.ndarray:
    """One training-mode draw of the model's dropout (bertcore.model.functional.dropout) on ``row``, from a
    generator seeded with ``seed``: each weight zeroed with probability p, the others divided by 1 - p."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.as_tensor(np.asarray(row, dtype=np.float32))
    return dropout(x, float(p), True, gen).double().numpy()
