"""Why the model predicts what it predicts: attention rollout and gradient attributions.

* ``attention_rollout`` (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", §3): the residual
  connection is modelled by mixing each layer's head-averaged attention with the identity,
  ``Ā_l = 0.5 · mean_h(A_l) + 0.5 · I`` (rows renormalised to sum to 1), and the layers are chained,
  ``rollout = Ā_L ··· Ā_1``. Row ``i`` says how much of the input token ``j`` reaches position ``i`` at the top.
* ``gradient × input`` (Shrikumar et al. 2016; Sundararajan et al. 2017 §2) and **integrated gradients**
  (Sundararajan, Taly & Yan 2017, "Axiomatic Attribution for Deep Networks", §3) on the word embeddings.
  The explained output ``f`` is a log-probability: ``log P(w | context)`` at one ``[MASK]`` (BERT §3.1), ``w``
  being the model's top prediction there, or ``log P(IsNext)`` (BERT §3.2).

  - integrated gradients: ``IG_i = (x_i − x'_i) · ∫_0^1 ∂f(x' + α(x − x'))/∂x_i dα``, summed over the
    embedding dimension per token. The integral uses the trapezoid rule with ``steps`` intervals
    (``DEFAULT_IG_STEPS``). The baseline ``x'`` replaces the word embedding of every non-special token by the
    ``[MASK]`` (default) or ``[PAD]`` embedding; ``[CLS]``/``[SEP]``, positions and segments are kept, so the
    position and segment embeddings are the same on the whole path and only the words get credit.
  - gradient × input: ``∂f(x)/∂x_i · x_i`` summed over the embedding dimension, the one-point (linear)
    approximation whose implicit baseline is the zero word embedding.

  Completeness (Sundararajan et al. §3, Prop. 1): ``Σ_i attr_i = f(x) − f(x')``. Each result reports
  ``completeness_gap = |Σ attr − (f(x) − f(x'))| / |f(x) − f(x')|`` for its own baseline (the zero embedding for
  gradient × input), so a user can see how far gradient × input is from a complete attribution.

Everything runs in eval mode (dropout off) and never changes the model: the forward pass from embeddings below
calls the model's own modules, so a shared model can be explained by two threads at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertcore.analysis.inference import encode_pair, inspect_pair, mask_indices
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode

METHODS = ("rollout", "grad_x_input", "integrated_gradients")
GRADIENT_METHODS = ("grad_x_input", "integrated_gradients")
BASELINES = ("mask", "pad")
DEFAULT_IG_STEPS = 64
MIN_IG_STEPS = 50
MAX_IG_STEPS = 2000
_POINTS_PER_CHUNK_TOKENS = 8192  # interpolation points x tokens per forward pass (bounds memory for long inputs)


@dataclass(frozen=True)
class Target:
    """What to explain: the ``index``-th ``[MASK]`` (0-based) or the NSP output."""

    kind: str  # "mask" | "nsp"
    index: int = 0

    def __str__(self) -> str:
        return "nsp" if self.kind == "nsp" else f"mask:{self.index}"


def parse_target(spec) -> Target:
    """``"mask"`` / ``"mask:i"`` (the i-th [MASK], 0-based) / ``"nsp"`` -> Target; InputError otherwise."""
    if isinstance(spec, Target):
        return spec
    s = str(spec).strip().lower()
    if s == "nsp":
        return Target("nsp")
    if s == "mask":
        return Target("mask", 0)
    if s.startswith("mask:"):
        raw = s[5:]
        if raw.isdigit():
            return Target("mask", int(raw))
    raise InputError(Message("target {target} is not understood; use 'mask' (the first [MASK]), 'mask:i' (the i-th "
                             "[MASK], 0-based) or 'nsp' (P(IsNext))", target=repr(spec)))


@dataclass
class Attribution:
    """One attribution of one output to the input tokens."""

    tokens: list
    method: str
    target: str  # "mask:i" or "nsp"
    target_label: str  # the explained token (e.g. "eats") or "IsNext"
    position: int  # the explained position: the [MASK] or 0 ([CLS]) for NSP
    attributions: np.ndarray  # float64 [T]
    f_input: float  # f(x)
    f_baseline: float  # f(x') (the zero word embedding for grad_x_input)
    completeness_gap: float
    baseline: str
    steps: int  # interpolation intervals (1 for grad_x_input)
    truncated: bool = False


# ----------------------------------------------------------------------------- rollout
def attention_rollout(attentions) -> np.ndarray:
    """Attention rollout ``Ā_L ··· Ā_1`` of attentions ``[L, H, T, T]`` (Abnar & Zuidema 2020, §3), ``[T, T]``."""
    A = np.asarray(attentions)  # no float64 copy of all heads: each layer's mean is taken in float64
    if A.ndim != 4 or A.shape[-1] != A.shape[-2]:
        raise InputError(Message("attentions must be [layers, heads, T, T], got shape {shape}", shape=str(A.shape)))
    T = A.shape[-1]
    eye = np.eye(T)
    rollout = eye
    for layer in A:
        a = 0.5 * layer.mean(axis=0, dtype=np.float64) + 0.5 * eye
        a = a / a.sum(axis=-1, keepdims=True)
        rollout = a @ rollout  # the newer layer on the left: Ā_l (Ā_{l-1} ··· Ā_1)
    return rollout


def rollout_for(model, tokenizer, a: str, b: str | None = None, max_len: int | None = None) -> dict:
    """``{tokens, rollout [T,T], truncated}`` for one input (the attentions of ``inspect_pair``)."""
    insp = inspect_pair(model, tokenizer, a, b, max_len=max_len)
    return {"tokens": list(insp.tokens), "rollout": attention_rollout(insp.attentions), "truncated": insp.truncated}


# ----------------------------------------------------------------------------- forward from embeddings
def forward_from_word_embeddings(model, word_emb: torch.Tensor, token_type_ids: torch.Tensor):
    """The model's forward pass (eval, one unpadded sequence per row) with the word embeddings given.

    ``word_emb`` (B, T, D) replaces ``word_embeddings(input_ids)``; everything else is BERT §3 as in
    ``BertForPreTraining.forward``: + positions + segments, LayerNorm, the encoder, [CLS] (pooler) -> NSP.
    Returns ``(last hidden states (B, T, D), nsp_logits (B, 2))``.
    """
    h, pooled = model.bert(None, token_type_ids, word_embeds=word_emb)  # (B, T, D), (B, D)
    return h, model.cls.seq_relationship(pooled)


def _objective(model, target: Target, position: int, token_id: int):
    """f(word embeddings, types) -> (B,) log-probabilities of the explained output."""
    def f(word_emb, types):
        h, nsp = forward_from_word_embeddings(model, word_emb, types)
        if target.kind == "nsp":
            return torch.log_softmax(nsp.float(), dim=-1)[:, 0]  # label 0 = IsNext
        logits = model.mlm_logits_from(h[:, position])  # (B, V)
        return torch.log_softmax(logits.float(), dim=-1)[:, token_id]
    return f


def _values_and_grads(f, points: torch.Tensor, types: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """f and ∂f/∂x at each of ``points`` (P, T, D), in chunks; returns ((P,), (P, T, D))."""
    T = points.shape[1]
    chunk = max(1, _POINTS_PER_CHUNK_TOKENS // max(T, 1))
    vals, grads = [], []
    for s in range(0, points.shape[0], chunk):
        x = points[s:s + chunk].detach().requires_grad_(True)
        with torch.enable_grad():
            y = f(x, types.expand(x.shape[0], -1))
            (g,) = torch.autograd.grad(y.sum(), x)
        vals.append(y.detach())
        grads.append(g)
    return torch.cat(vals), torch.cat(grads)


def _gap(total: float, f_x: float, f_base: float) -> float:
    delta = f_x - f_base
    if abs(delta) < 1e-12:
        return 0.0 if abs(total) < 1e-12 else float("inf")
    return abs(total - delta) / abs(delta)


def _resolve_target(model, tokenizer, target: Target, ids: list, b) -> tuple[int, int, str]:
    """(position, token id, label) of the explained output; InputError when the input cannot have it."""
    if target.kind == "nsp":
        if not getattr(model, "has_nsp_head", True):
            raise InputError(Message("this model has no NSP head, so P(IsNext) cannot be explained; use --target mask"))
        if b is None:
            raise InputError(Message("--target nsp needs sentence B: give two texts (sentence A and sentence B)"))
        return 0, -1, "IsNext"
    if not getattr(model, "has_mlm_head", True):
        raise InputError(Message("this model has no MLM head, so a [MASK] prediction cannot be explained; "
                                 "use rollout, or a checkpoint with cls.predictions"))
    masks = mask_indices(tokenizer, ids)
    if not masks:
        raise InputError(Message("the text has no [MASK] (within the model's maximum length); write [MASK] where a "
                                 "word should be predicted, e.g. 'the cat [MASK] on the mat'"))
    if target.index >= len(masks):
        raise InputError(Message("target mask:{index} asks for [MASK] number {number} (0-based) but the text has {n}; "
                                 "use mask:0 .. mask:{last}", index=target.index, number=target.index, n=len(masks),
                                 last=len(masks) - 1))
    return masks[target.index], -1, ""


def explain(model, tokenizer, a: str, b: str | None = None, target="mask", method: str = "integrated_gradients",
            steps: int = DEFAULT_IG_STEPS, baseline: str = "mask", max_len: int | None = None) -> Attribution:
    """Attribute one prediction to the input tokens with ``grad_x_input`` or ``integrated_gradients``."""
    if method not in GRADIENT_METHODS:
        raise InputError(Message("method {method} is not a gradient method; use one of {methods} (or "
                                 "attention_rollout for rollout)", method=repr(method),
                                 methods=", ".join(GRADIENT_METHODS)))
    if baseline not in BASELINES:
        raise InputError(Message("baseline {baseline} is unknown; use one of {baselines}", baseline=repr(baseline),
                                 baselines=", ".join(BASELINES)))
    if isinstance(steps, bool) or not isinstance(steps, int) or not MIN_IG_STEPS <= steps <= MAX_IG_STEPS:
        raise InputError(Message("steps={steps} must be a whole number in [{lo}, {hi}] (integrated gradients needs "
                                 "at least 50 steps to be close to complete)", steps=repr(steps), lo=MIN_IG_STEPS,
                                 hi=MAX_IG_STEPS))
    tgt = parse_target(target)
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    ids, types, truncated = encode_pair(tokenizer, a, b, limit)
    position, token_id, label = _resolve_target(model, tokenizer, tgt, ids, b)
    with eval_mode(model, grad=True):
        ids_t = torch.tensor([ids], dtype=torch.long)
        types_t = torch.tensor([types], dtype=torch.long)
        table = model.bert.embeddings.word_embeddings.weight.detach()
        x = table[ids_t[0]].unsqueeze(0)  # (1, T, D)
        if tgt.kind == "mask":
            with torch.no_grad():
                h, _ = forward_from_word_embeddings(model, x, types_t)
                token_id = int(model.mlm_logits_from(h[:, position]).argmax(-1))
            label = tokenizer.convert_ids_to_tokens([token_id])[0]
        f = _objective(model, tgt, position, token_id)
        if method == "grad_x_input":
            base = torch.zeros_like(x)
            vals, grads = _values_and_grads(f, torch.cat([x, base]), types_t)
            attr = (grads[0] * x[0]).sum(-1)
            f_x, f_base, n = float(vals[0]), float(vals[1]), 1
        else:
            base = _baseline(tokenizer, ids_t[0], table, baseline).unsqueeze(0)
            alphas = torch.linspace(0.0, 1.0, steps + 1).view(-1, 1, 1)
            points = base + alphas * (x - base)  # (steps+1, T, D): x' ... x
            vals, grads = _values_and_grads(f, points, types_t)
            w = torch.full((steps + 1, 1, 1), 1.0 / steps)
            w[0] = w[-1] = 0.5 / steps  # trapezoid rule
            attr = ((x[0] - base[0]) * (w * grads).sum(0)).sum(-1)
            f_x, f_base, n = float(vals[-1]), float(vals[0]), steps
    attributions = attr.double().numpy()
    return Attribution(
        tokens=list(tokenizer.convert_ids_to_tokens(ids)), method=method, target=str(tgt), target_label=label,
        position=position, attributions=attributions, f_input=f_x, f_baseline=f_base,
        completeness_gap=_gap(float(attributions.sum()), f_x, f_base), baseline="zero" if n == 1 else baseline,
        steps=n, truncated=truncated)


def _baseline(tokenizer, ids: torch.Tensor, table: torch.Tensor, kind: str) -> torch.Tensor:
    """(T, D) baseline: the [MASK] or [PAD] embedding at every non-special position, specials kept."""
    fill = tokenizer.mask_id if kind == "mask" else tokenizer.pad_id
    special = torch.tensor([int(i) in tokenizer.special_ids and int(i) != tokenizer.mask_id for i in ids.tolist()])
    base_ids = torch.where(special, ids, torch.full_like(ids, fill))
    return table[base_ids]


# ----------------------------------------------------------------------------- comparing explanations
def rank_correlation(x, y) -> float:
    """Spearman's rank correlation of two equal-length score vectors (ties get their average rank)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(Message("rank correlation needs two vectors of the same length, got {x} and {y}",
                                 x=str(x.shape), y=str(y.shape)))
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def explain_all(model, tokenizer, a: str, b: str | None = None, target="mask", steps: int = DEFAULT_IG_STEPS,
                baseline: str = "mask", max_len: int | None = None) -> dict:
    """Rollout row, gradient × input and integrated gradients for one target, plus their rank correlations.

    ``rollout`` is the row of the explained position (the [MASK], or [CLS] for NSP): how much of each input
    token reaches it through attention alone. Correlations are Spearman's over all tokens.
    """
    ig = explain(model, tokenizer, a, b, target, "integrated_gradients", steps, baseline, max_len)
    gxi = explain(model, tokenizer, a, b, target, "grad_x_input", steps, baseline, max_len)
    ro = rollout_for(model, tokenizer, a, b, max_len)
    row = ro["rollout"][ig.position]
    scores = {"rollout": row, "grad_x_input": gxi.attributions, "integrated_gradients": ig.attributions}
    names = list(scores)
    corr = {f"{p}~{q}": rank_correlation(scores[p], scores[q]) for i, p in enumerate(names) for q in names[i + 1:]}
    return {"tokens": ig.tokens, "position": ig.position, "target": ig.target, "target_label": ig.target_label,
            "scores": scores, "results": {"grad_x_input": gxi, "integrated_gradients": ig}, "rollout": ro["rollout"],
            "rank_correlation": corr, "truncated": ig.truncated}
