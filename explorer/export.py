"""Downloads: figure export through plotly's own modebar (SVG or PNG drawn by the browser, no server-side
browser) and the numbers behind each view as CSV / NPZ bytes for ``st.download_button``. No streamlit here.

Layers and heads are 0-based in the files (as in the CLI and JSON); the CSV headers say so.
"""
from __future__ import annotations

import io
import re
from typing import Sequence

import numpy as np
import pandas as pd

from explorer.figures.inspect import token_labels

FIGURE_FORMATS = ("svg", "png")


def safe_filename(name: str) -> str:
    """A file-name stem from any text: letters, digits, ``-`` and ``_`` only, at most 60 characters."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_")
    return stem[:60] or "figure"


def plotly_config(filename: str, fmt: str = "svg") -> dict:
    """``st.plotly_chart(config=...)``: the modebar's camera button saves the figure as ``fmt`` (svg or png).

    SVG is vector (for papers); PNG is drawn at 2x scale. The browser renders the file, the server never does.
    """
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"figure format {fmt!r} is not supported; use one of {', '.join(FIGURE_FORMATS)}")
    opts = {"format": fmt, "filename": safe_filename(filename)}
    if fmt == "png":
        opts["scale"] = 2
    return {"displaylogo": False, "displayModeBar": True, "toImageButtonOptions": opts,
            "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, float_format="%.6g").encode("utf-8")


def attention_csv(attn: np.ndarray, tokens: Sequence[str]) -> bytes:
    """One head's ``[T, T]`` attention as a matrix: a ``query`` column, then one column per key ``"<j> <token>"``."""
    A = np.asarray(attn, dtype=np.float64)
    labels = token_labels(tokens, escape=False)
    if A.shape != (len(labels), len(labels)):
        raise ValueError(f"attention of shape {A.shape} does not match {len(labels)} tokens")
    df = pd.DataFrame(A, columns=labels)
    df.insert(0, "query", labels)
    return _csv(df)


def rollout_csv(rollout: np.ndarray, tokens: Sequence[str]) -> bytes:
    """Attention rollout ``[T, T]``: rows = positions at the top of the model, columns = input tokens."""
    return attention_csv(rollout, tokens)


def attributions_csv(tokens: Sequence[str], scores: dict) -> bytes:
    """``position, token`` and one column per method (e.g. rollout, grad_x_input, integrated_gradients)."""
    df = pd.DataFrame({"position": range(len(tokens)), "token": [str(t) for t in tokens]})
    for name, v in scores.items():
        v = np.asarray(v, dtype=np.float64)
        if v.shape != (len(tokens),):
            raise ValueError(f"{name} has {v.shape} scores for {len(tokens)} tokens")
        df[name] = v
    return _csv(df)


def importance_csv(rows: Sequence[dict]) -> bytes:
    """The head-importance map: one row per head, 0-based ``layer, head`` and the metric changes ``d_*``."""
    return _csv(pd.DataFrame(list(rows)))


def attentions_npz(attentions: np.ndarray, tokens: Sequence[str], segment_ids: Sequence[int] | None = None) -> bytes:
    """All attentions as a compressed NPZ: ``attentions`` float32 [L, H, T, T], ``tokens`` (str) and ``segment_ids``.

    Load with ``np.load(f)`` (no pickle needed: the tokens are a fixed-width unicode array).
    """
    A = np.asarray(attentions, dtype=np.float32)
    arrays = {"attentions": A, "tokens": np.array([str(t) for t in tokens], dtype=str)}
    if segment_ids is not None:
        arrays["segment_ids"] = np.asarray(list(segment_ids), dtype=np.int64)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def head_measures_csv(rows: Sequence[dict], step: int | None = None) -> bytes:
    """Head roles (``bertcore.analysis.heads.head_rows``): 0-based ``layer, head``, the seven measures, ``role``;
    a ``step`` column first when the model is a run's saved step (as ``heads RUN --step N --json`` prints)."""
    df = pd.DataFrame(list(rows))
    if step is not None:
        df.insert(0, "step", int(step))
    return _csv(df)


def probes_csv(steps: Sequence[int], results: Sequence) -> bytes:
    """Probes over training (``bertcore.analysis.probing``): one row per (step, layer), 0-based layers (0 = the
    embedding output), with accuracy, control accuracy, selectivity and both chance levels. Step -1: the final
    checkpoint of a run without saved steps."""
    rows = [{"step": s, "layer": lp.layer, "accuracy": lp.accuracy, "control_accuracy": lp.control_accuracy,
             "selectivity": lp.selectivity, "chance": lp.chance, "control_chance": lp.control_chance}
            for s, r in zip(steps, results) for lp in r.layers]
    return _csv(pd.DataFrame(rows, columns=["step", "layer", "accuracy", "control_accuracy", "selectivity",
                                            "chance", "control_chance"]))


def lens_csv(top: Sequence, word: str | None = None, ranks: Sequence | None = None,
             probs: Sequence | None = None) -> bytes:
    """The logit lens at one [MASK]: one row per layer (0 = embedding output) and top-k rank, with the chosen
    word's rank and probability at that layer when given (``python -m bertcore lens --json`` has the same)."""
    rows = []
    for layer, cands in enumerate(top):
        for k, (t, p) in enumerate(cands):
            row = {"layer": layer, "k": k + 1, "token": t, "prob": p}
            if word is not None:
                row.update(word=word, word_rank=ranks[layer], word_prob=probs[layer])
            rows.append(row)
    return _csv(pd.DataFrame(rows))


def patch_csv(effect: np.ndarray, raw: np.ndarray, tokens: Sequence[str], positions: Sequence[int]) -> bytes:
    """The layer x position patching map, long form: layer (0 = embeddings), position (0-based), token of A,
    normalised effect (0 = A's answer, 1 = B's) and the raw change of logit(right) - logit(wrong)."""
    rows = [{"layer": layer, "position": p, "token": tokens[p], "effect": effect[layer, c], "raw": raw[layer, c]}
            for layer in range(effect.shape[0]) for c, p in enumerate(positions)]
    return _csv(pd.DataFrame(rows))


def head_patch_csv(effect: np.ndarray, raw: np.ndarray) -> bytes:
    """The layer x head patching map (0-based layer of the encoder and head), normalised and raw."""
    rows = [{"layer": i, "head": h, "effect": effect[i, h], "raw": raw[i, h]}
            for i in range(effect.shape[0]) for h in range(effect.shape[1])]
    return _csv(pd.DataFrame(rows))


def matrix_csv(matrix: np.ndarray, tokens: Sequence[str], columns: Sequence[str], first: int = 0) -> bytes:
    """A stage of one forward pass (the "Inside the model" page): ``position, token`` and one column per
    ``columns`` entry (dimensions, or keys of a T x T matrix), every row of ``matrix``, values as the trace has them
    (9 significant digits: float32 read back exactly). ``first``: the position of the first row."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] != len(columns) or m.shape[0] > len(tokens):
        raise ValueError(f"matrix of shape {m.shape} does not match {len(tokens)} tokens and {len(columns)} columns")
    df = pd.DataFrame(m, columns=list(columns))
    df.insert(0, "token", [str(t) for t in tokens[: m.shape[0]]])
    df.insert(0, "position", range(first, first + m.shape[0]))
    return df.to_csv(index=False, float_format="%.9g").encode("utf-8")
