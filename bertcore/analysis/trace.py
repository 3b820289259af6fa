"""The glass box: one forward pass of one input with every named tensor of the embeddings and of one layer.

What a learner reading the seeds' ``Attention.forward`` (seed 000), ``attention()`` (seed 002) or ``BERTEncoder``
(seed 004) asks: what are Q, K, V, the scores, the softmax, the context, W^O, the residual, the LayerNorm and the
FFN for *this* sentence in *this* model? :func:`trace` answers with the model's own numbers (the named tensors of
``bertcore.model.tap``, read in eval mode), the batch dimension dropped. The CLI's ``trace`` prints it; the
"Inside the model" page draws it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from bertcore.analysis.inference import embedded_segments, encode_pair
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode
from bertcore.model.tap import Tap, tensor_names

FINAL = ("encoder.output", "pooler.output", "mlm.transform", "mlm.logits", "nsp.logits")


@dataclass
class Trace:
    tokens: list
    input_ids: list
    segment_ids: list  # the API's token types: 0 = sentence A, 1 = sentence B
    layer: int  # 0-based
    tensors: dict  # name -> float32 array without the batch dimension
    truncated: bool = False
    embedded_segment_ids: list = field(default_factory=list)  # the segment rows the model looks up
    notes: list = field(default_factory=list)


def layer_names(config, layer: int, final: bool = True) -> list[str]:
    """The names :func:`trace` keeps: the embeddings, every tensor of ``layer`` and (``final``) the heads'."""
    names = [n.name for n in tensor_names(config, [layer])]
    keep = [n for n in names if n.startswith(("embeddings.", f"layer.{layer}."))]
    return keep + ([n for n in names if n in FINAL] if final else [])


def check_layer(model, layer) -> int:
    L = int(model.config.num_hidden_layers)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < L:
        raise InputError(Message("layer {layer} does not exist; this model has layers 0..{last} (0-based)",
                                 layer=repr(layer), last=L - 1))
    return layer


def trace(model, tokenizer, a: str, b: str | None = None, layer: int = 0, max_len: int | None = None,
          final: bool = True) -> Trace:
    """Every named tensor of the embeddings and of encoder layer ``layer`` (0-based) for ``[CLS] a [SEP] (b
    [SEP])``, and with ``final`` the encoder output, the pooled [CLS] and the heads' logits (the MLM logits only
    for a model with an MLM head). One forward pass in eval mode; the same numbers as any other forward."""
    check_layer(model, layer)
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    ids, types, truncated = encode_pair(tokenizer, a, b, limit)
    names = layer_names(model.config, layer, final)
    tap = Tap(names)
    with eval_mode(model):
        x = torch.tensor([ids], dtype=torch.long)
        model(x, token_type_ids=torch.tensor([types], dtype=torch.long), attention_mask=torch.ones_like(x), tap=tap)
    tensors = {n: tap.cache[n][0].detach().float().numpy() for n in names if n in tap.cache}
    if not getattr(model, "has_nsp_head", True):
        tensors.pop("nsp.logits", None)
    notes = []
    if not model.config.type_vocab_size:
        notes.append("this model has no segment embedding (its config has type_vocab_size 0)")
    if not getattr(model, "has_mlm_head", True):
        notes.append("this model has no MLM head (e.g. all-MiniLM-L6-v2 was published without one): no MLM logits")
    if not getattr(model, "has_nsp_head", True):
        notes.append("this model has no NSP head: no NSP logits")
    return Trace(list(tokenizer.convert_ids_to_tokens(ids)), ids, types, layer, tensors, truncated,
                 embedded_segments(model, types), notes)


def trace_json(t: Trace) -> dict:
    """``{"tokens", "layer", "tensors": {name: {"shape", "values"}}, ...}``: the CLI's ``trace --json``."""
    return {"tokens": t.tokens, "input_ids": t.input_ids, "segment_ids": t.segment_ids, "layer": t.layer,
            "truncated": t.truncated, "notes": t.notes,
            "tensors": {n: {"shape": list(v.shape), "values": v.tolist()} for n, v in t.tensors.items()}}


def layer_norm_stats(x: np.ndarray, unbiased: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per token: the mean and the variance a LayerNorm divides by (biased, as nn.LayerNorm; unbiased (n - 1) as
    the seeds' own LayerNorm, which then divides by std + eps)."""
    x = np.asarray(x, dtype=np.float64)
    return x.mean(-1), x.var(-1, ddof=1 if unbiased else 0)
