"""Per-head attention statistics, pure numpy (no streamlit, no torch).

Input is the attention tensor returned by ``bertcore.analysis.inference.inspect_pair``: ``[L, H, T, T]`` with
rows = queries and columns = keys; each row sums to 1 over the keys the query may attend to.

For every (layer, head) we compute, averaged over the valid query rows:

* ``entropy`` -- ``-sum_k p_k log p_k`` in nats (0 log 0 = 0). A uniform row over T keys gives ``log T``;
  a one-hot row gives 0.
* ``to_cls`` / ``to_sep`` -- total weight each query puts on ``[CLS]`` / on all ``[SEP]`` tokens.
* ``to_self`` -- ``A[i, i]``.
* ``to_prev`` -- ``A[i, i-1]`` averaged over queries that have a previous token (i >= 1).
* ``to_next`` -- ``A[i, i+1]`` averaged over queries that have a next token (i <= T-2).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from bertcore.data.tokenization import canonical_special
from explorer.i18n import mark

STAT_COLUMNS = ["entropy", "to_cls", "to_sep", "to_self", "to_prev", "to_next"]
STAT_LABELS = {  # English; shown with explorer.i18n.tr
    "entropy": mark("entropy (nats)"),
    "to_cls": mark("attention to [CLS]"),
    "to_sep": mark("attention to [SEP]"),
    "to_self": mark("attention to self"),
    "to_prev": mark("attention to previous token"),
    "to_next": mark("attention to next token"),
}


def _valid_mask(tokens: Sequence[str] | None, T: int, valid: np.ndarray | None) -> np.ndarray:
    if valid is not None:
        m = np.asarray(valid, dtype=bool)
        if m.shape != (T,):
            raise ValueError(f"valid mask must have shape ({T},), got {m.shape}")
        return m
    if tokens is not None:
        return np.array([canonical_special(t) != "[PAD]" for t in tokens], dtype=bool)
    return np.ones(T, dtype=bool)


def row_entropy(attn: np.ndarray) -> np.ndarray:
    """Entropy in nats of each row of a (..., T) probability array, with 0 log 0 = 0."""
    p = np.asarray(attn)
    if p.dtype not in (np.float32, np.float64):
        p = p.astype(np.float64)
    # float32 maps stay float32 (a 72-head, 512-token input is 19M weights: no float64 copies of it);
    # each row's sum is accumulated in float64
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(np.where(p > 0, p, 1.0))  # 0 log 0 = 0: log(1) where p == 0
    return -(p * logp).sum(axis=-1, dtype=np.float64)


def head_stats_array(
    attentions: np.ndarray,
    tokens: Sequence[str] | None = None,
    valid: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Return ``{stat: array [L, H]}`` for the statistics in ``STAT_COLUMNS``.

    ``tokens`` identifies [CLS]/[SEP]/[PAD] positions; ``valid`` (bool [T]) overrides which positions
    are real (padding rows are excluded from the means; padding keys are only summed if they carry weight).
    Statistics that are undefined (no [CLS] in tokens, T == 1 for prev/next) are NaN.
    """
    A = np.asarray(attentions)
    if A.dtype not in (np.float32, np.float64):
        A = A.astype(np.float64)
    if A.ndim != 4 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"attentions must be [L, H, T, T], got shape {A.shape}")
    L, H, T, _ = A.shape
    m = _valid_mask(tokens, T, valid)
    rows = np.flatnonzero(m)
    nan = np.full((L, H), np.nan)
    out: dict[str, np.ndarray] = {}
    if rows.size == 0:
        return {k: nan.copy() for k in STAT_COLUMNS}

    sub = A if rows.size == T else A[:, :, rows, :]  # [L,H,R,T]; no copy when every position is real
    out["entropy"] = row_entropy(sub).mean(axis=-1)

    toks = [canonical_special(t) for t in tokens] if tokens is not None else [""] * T  # <sos> = [CLS] ...
    cls_idx = [i for i, t in enumerate(toks) if t == "[CLS]"]
    sep_idx = [i for i, t in enumerate(toks) if t == "[SEP]"]
    out["to_cls"] = sub[..., cls_idx].sum(-1, dtype=np.float64).mean(-1) if cls_idx else nan.copy()
    out["to_sep"] = sub[..., sep_idx].sum(-1, dtype=np.float64).mean(-1) if sep_idx else nan.copy()

    diag = np.diagonal(A, axis1=2, axis2=3)  # [L,H,T]
    out["to_self"] = diag[:, :, rows].mean(-1, dtype=np.float64)

    prev_rows = [i for i in rows if i >= 1 and m[i - 1]]
    next_rows = [i for i in rows if i + 1 < T and m[i + 1]]
    if prev_rows:
        pr = np.array(prev_rows)
        out["to_prev"] = A[:, :, pr, pr - 1].mean(-1, dtype=np.float64)
    else:
        out["to_prev"] = nan.copy()
    if next_rows:
        nr = np.array(next_rows)
        out["to_next"] = A[:, :, nr, nr + 1].mean(-1, dtype=np.float64)
    else:
        out["to_next"] = nan.copy()
    return out


def head_stats(
    attentions: np.ndarray,
    tokens: Sequence[str] | None = None,
    valid: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per (layer, head) with 1-based ``layer``/``head`` columns and ``STAT_COLUMNS``."""
    arrs = head_stats_array(attentions, tokens, valid)
    L, H = arrs["entropy"].shape
    ll, hh = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")
    df = pd.DataFrame({"layer": ll.ravel(), "head": hh.ravel()})
    for k in STAT_COLUMNS:
        df[k] = arrs[k].ravel()
    return df


def max_entropy(tokens: Sequence[str] | None, T: int) -> float:
    """Entropy of a uniform row over the valid keys: log(#valid)."""
    n = int(_valid_mask(tokens, T, None).sum())
    return float(np.log(max(n, 1)))


def top_attended(attn: np.ndarray, tokens: Sequence[str], k: int = 3) -> pd.DataFrame:
    """The text alternative to a heatmap: for each query, its ``k`` most attended keys and their weights.

    ``attn`` is one ``[T, T]`` map (a head, or a rollout); ties keep the earlier key. Columns: ``position``,
    ``query``, then ``key 1, weight 1, ..., key k, weight k`` (keys read ``"<position> <token>"``).
    """
    A = np.asarray(attn, dtype=np.float64)
    T = len(tokens)
    if A.shape != (T, T):
        raise ValueError(f"attention of shape {A.shape} does not match {T} tokens")
    k = max(1, min(int(k), T))
    order = np.argsort(-A, axis=1, kind="stable")[:, :k]
    df = pd.DataFrame({"position": np.arange(T), "query": [str(t) for t in tokens]})
    for r in range(k):
        df[f"key {r + 1}"] = [f"{j} {tokens[j]}" for j in order[:, r]]
        df[f"weight {r + 1}"] = A[np.arange(T), order[:, r]]
    return df
