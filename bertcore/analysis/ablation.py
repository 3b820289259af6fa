"""Head ablation (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?", §2-3).

Switching a head off multiplies its attention probabilities by 0 (``head_mask[l, h] = 0`` in
``BertForPreTraining.forward``, the HF transformers semantics), so its context vector is zero and the rest of the
network sees only the other heads. The effect is measured on a fixed held-out batch with fixed masks and NSP
choices (``PretrainingData.fixed_eval_batches``), so two evaluations differ only by the mask:

* ``evaluate``: held-out MLM loss / accuracy at the selected positions (BERT §3.1) and NSP loss / accuracy (§3.2);
* ``ablate``: the same with a set of heads switched off at once, and the change from the unablated baseline;
* ``head_importance``: every head switched off alone, the L x H importance map of Michel et al. §3 (Δ loss).

Layers and heads are 0-based here, in the CLI and in JSON; the app numbers them from 1.
"""
from __future__ import annotations

import torch

from bertcore.config import TrainConfig
from bertcore.data.pretraining import MaskingRates, PretrainingData
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode

DEFAULT_EXAMPLES = 256
METRICS = ("mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc")


def held_out_batches(tokenizer, corpus, train_config: dict | None = None, n_examples: int = DEFAULT_EXAMPLES,
                     max_len: int | None = None) -> list[dict]:
    """The fixed held-out batches of ``corpus`` under the model's training settings (seed, split, lengths).

    With the ``train_config`` a checkpoint was trained with (and the same corpus), these are held-out pairs the
    model never trained on; without it the TrainConfig defaults are used.
    """
    if isinstance(n_examples, bool) or not isinstance(n_examples, int) or not 1 <= n_examples <= 100_000:
        raise InputError(Message("n_examples={n} must be a whole number in [1, 100000]", n=repr(n_examples)))
    tc = TrainConfig.from_dict(dict(train_config)) if train_config else TrainConfig()
    seq_len = min(tc.max_seq_len, int(max_len)) if max_len is not None else tc.max_seq_len
    data = PretrainingData(corpus, tokenizer, seq_len, MaskingRates.from_train_config(tc), tc.nsp_positive_prob,
                           tc.held_out_frac, tc.seed)
    return data.fixed_eval_batches(n_examples, tc.seed)


def head_mask_for(heads, n_layers: int, n_heads: int) -> torch.Tensor:
    """``[L, H]`` ones with 0 at each (layer, head) in ``heads`` (0-based); InputError for a head out of range."""
    mask = torch.ones(n_layers, n_heads)
    for pair in heads or ():
        layer, head = (int(v) for v in pair)
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise InputError(Message("head {layer}.{head} does not exist; this model has layers 0..{last_layer} and "
                                     "heads 0..{last_head} (0-based LAYER.HEAD)", layer=layer, head=head,
                                     last_layer=n_layers - 1, last_head=n_heads - 1))
        mask[layer, head] = 0.0
    return mask


def parse_heads(spec: str) -> list[tuple[int, int]]:
    """``"0.1,2.3"`` -> [(0, 1), (2, 3)] (0-based LAYER.HEAD); InputError naming the bad item."""
    out = []
    for item in str(spec).split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise InputError(Message("head {item} is not LAYER.HEAD; write 0-based pairs such as 0.1,2.3",
                                     item=repr(item)))
        out.append((int(parts[0]), int(parts[1])))
    if not out:
        raise InputError(Message("no heads given; write 0-based LAYER.HEAD pairs such as 0.1,2.3"))
    return list(dict.fromkeys(out))


def _check_heads(model) -> None:
    if not getattr(model, "has_mlm_head", True) or not getattr(model, "has_nsp_head", True):
        raise InputError(Message("head ablation measures the held-out MLM and NSP metrics, and this model lacks an "
                                 "MLM or NSP head (e.g. all-MiniLM-L6-v2); use a model trained here or a "
                                 "BertForPreTraining import"))


def evaluate(model, batches: list[dict], head_mask: torch.Tensor | None = None) -> dict:
    """Held-out ``mlm_loss, mlm_acc, nsp_loss, nsp_acc`` over ``batches`` (eval mode), with ``head_mask`` applied."""
    _check_heads(model)
    tot = torch.zeros(5, dtype=torch.float64)  # mlm loss sum, mlm correct, selected, nsp loss sum, nsp correct
    n_ex = 0
    with eval_mode(model):
        for b in batches:
            if len(b["nsp_labels"]) == 0:
                continue
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                        mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"], head_mask=head_mask)
            targets = b["mlm_labels"][out.mlm_positions]
            n_sel = targets.numel()
            nb = len(b["nsp_labels"])
            tot += torch.tensor([float(out.mlm_loss) * n_sel, float((out.mlm_logits.argmax(-1) == targets).sum()),
                                 n_sel, float(out.nsp_loss) * nb,
                                 float((out.nsp_logits.argmax(-1) == b["nsp_labels"]).sum())], dtype=torch.float64)
            n_ex += nb
    mlm_sum, mlm_ok, n_sel, nsp_sum, nsp_ok = tot.tolist()
    nan = float("nan")
    return {"mlm_loss": mlm_sum / n_sel if n_sel else nan, "mlm_acc": mlm_ok / n_sel if n_sel else nan,
            "nsp_loss": nsp_sum / n_ex if n_ex else nan, "nsp_acc": nsp_ok / n_ex if n_ex else nan}


def _delta(after: dict, before: dict) -> dict:
    return {f"d_{k}": after[k] - before[k] for k in METRICS}


def _dims(model) -> tuple[int, int]:
    return int(model.config.num_hidden_layers), int(model.config.num_attention_heads)


def ablate(model, batches: list[dict], heads, baseline: dict | None = None) -> dict:
    """Switch off all ``heads`` (0-based (layer, head) pairs) at once: ``{baseline, ablated, delta, heads}``."""
    L, H = _dims(model)
    mask = head_mask_for(heads, L, H)
    base = baseline if baseline is not None else evaluate(model, batches)
    after = evaluate(model, batches, mask) if heads else dict(base)
    return {"baseline": base, "ablated": after, "delta": _delta(after, base),
            "heads": [{"layer": int(a), "head": int(b)} for a, b in heads or ()]}


def head_importance(model, batches: list[dict], heads=None, baseline: dict | None = None) -> dict:
    """Each head switched off alone (all heads, or those in ``heads``): ``{baseline, heads: [{layer, head, d_*}]}``.

    ``d_mlm_loss`` > 0 means the model got worse without the head: the importance of Michel et al. §3.
    """
    L, H = _dims(model)
    base = baseline if baseline is not None else evaluate(model, batches)
    todo = list(heads) if heads is not None else [(layer, h) for layer in range(L) for h in range(H)]
    rows = []
    for layer, h in todo:
        after = evaluate(model, batches, head_mask_for([(layer, h)], L, H))
        rows.append({"layer": int(layer), "head": int(h), **_delta(after, base)})
    return {"baseline": base, "heads": rows}
