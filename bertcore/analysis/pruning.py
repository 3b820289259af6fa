"""Head pruning curve (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?", §4).

* ``gradient_importance``: the importance of head h is I_h = |dL/dxi_h|, the absolute gradient of the
  pretraining loss (MLM + NSP, BERT §3.1-3.2) with respect to the head's mask variable xi_h (all xi = 1: the
  unablated model), taken per held-out batch and summed over the batches, as in the authors' released code
  (§4.1 eq. 2 writes the expectation over examples; the code takes |.| per minibatch). The mask is the one
  ``bertcore.analysis.ablation`` uses (``head_mask`` multiplies each head's attention probabilities). Unlike the
  paper's §4.1 we do not normalise the scores per layer: with 2-6 layers of a tiny model the raw gradients
  compare across layers directly, and the JSON holds them as they are.
* ``pruning_curve``: heads removed one by one in ascending order of importance (ties: lower layer, then lower
  head first); after each removal the held-out MLM and NSP metrics (``ablation.evaluate``) on the same fixed
  batch. Point 0 is the unablated model; the last point has every head removed.

Layers and heads are 0-based.
"""
from __future__ import annotations

import torch

from bertcore.analysis.ablation import evaluate, head_mask_for
from bertcore.model.modes import eval_mode


def _dims(model) -> tuple[int, int]:
    return int(model.config.num_hidden_layers), int(model.config.num_attention_heads)


def gradient_importance(model, batches: list[dict]) -> torch.Tensor:
    """[L, H] float64: sum over ``batches`` of |d(mlm_loss + nsp_loss) / d head_mask| at head_mask = 1 (eval mode)."""
    if not getattr(model, "has_mlm_head", True) or not getattr(model, "has_nsp_head", True):
        evaluate(model, [])  # raises the InputError that says why (no MLM or NSP head)
    L, H = _dims(model)
    total = torch.zeros(L, H, dtype=torch.float64)
    with eval_mode(model, grad=True):  # the gradient with respect to the head mask
        for b in batches:
            if len(b["nsp_labels"]) == 0:
                continue
            xi = torch.ones(L, H, requires_grad=True)
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                        mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"], head_mask=xi)
            (grad,) = torch.autograd.grad(out.mlm_loss + out.nsp_loss, xi)
            total += grad.detach().abs().double()
    return total


def pruning_order(importance: torch.Tensor) -> list[tuple[int, int]]:
    """All (layer, head) pairs, least important first; ties by (layer, head)."""
    L, H = importance.shape
    return sorted(((layer, h) for layer in range(L) for h in range(H)),
                  key=lambda lh: (float(importance[lh[0], lh[1]]), lh[0], lh[1]))


def pruning_curve(model, batches: list[dict], importance: torch.Tensor | None = None, progress=None) -> dict:
    """``{importance: [{layer, head, importance}], order: [{layer, head}], points: [{removed, heads_left,
    mlm_loss, mlm_acc, nsp_loss, nsp_acc}]}``; ``points[k]`` has the first k heads of ``order`` removed."""
    L, H = _dims(model)
    imp = gradient_importance(model, batches) if importance is None else importance.double()
    order = pruning_order(imp)
    points = []
    for k in range(len(order) + 1):
        mask = head_mask_for(order[:k], L, H) if k else None
        points.append({"removed": k, "heads_left": L * H - k, **evaluate(model, batches, mask)})
        if progress is not None:
            progress(k + 1, len(order) + 1)
    return {"importance": [{"layer": layer, "head": h, "importance": float(imp[layer, h])}
                           for layer in range(L) for h in range(H)],
            "order": [{"layer": layer, "head": h} for layer, h in order], "points": points}
