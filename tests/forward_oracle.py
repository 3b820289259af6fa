"""The matrix each stage of the "Inside the model" page must show, read straight from ``trace --json`` (written
here again, not with explorer.figures.forward_stages), for tests/test_forward_page.py and tests/test_browser_forward.py."""
from __future__ import annotations

import numpy as np


def expected(js: dict, stage: str, config, layer: int, head: int) -> np.ndarray | None:
    """The stage's matrix read straight from ``trace --json`` (written here again, not with forward_stages)."""
    ts = {k: np.asarray(v["values"], dtype=np.float32) for k, v in js["tensors"].items()}
    p = f"layer.{layer}."
    per_head = {"scores": "scores", "scaled": "scaled", "masked": "masked", "softmax": "probs",
                "attn_dropout": "probs", "context": "context"}
    if stage == "qkv":
        return np.concatenate([ts[p + f"attention.{n}"][head] for n in ("query", "key", "value")], axis=1)
    if stage in per_head:
        return ts[p + "attention." + per_head[stage]][head]
    if stage == "concat":
        c = ts[p + "attention.context"]
        return np.concatenate(list(c), axis=1)
    pre = config.norm_placement == "pre"
    name = {"token": "embeddings.token", "position": "embeddings.position", "segment": "embeddings.segment",
            "sum": "embeddings.sum", "emb_norm": "embeddings.output",
            "attn_norm_before": p + "attention.ln_output" if pre else None, "w_o": p + "attention.output",
            "attn_add_norm": p + "attention.residual", "ffn_norm_before": p + "ffn.ln_output" if pre else None,
            "ffn_w1": p + "ffn.pre_activation", "ffn_act": p + "ffn.intermediate", "ffn_w2": p + "ffn.output",
            "ffn_add_norm": p + "output",
            "next_layer": "encoder.output" if layer == config.num_hidden_layers - 1 else p + "output",
            "mlm": "mlm.logits", "nsp": "pooler.output"}[stage]
    if name is None or name not in ts:
        return None
    return ts[name][None, :] if ts[name].ndim == 1 else ts[name]
