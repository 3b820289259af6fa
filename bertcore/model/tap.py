"""Named intermediates of one forward pass: read any of them, replace any of them.

In the spirit of TransformerLens's ``run_with_cache`` / ``run_with_hooks``, written for this model. Every module
passes each tensor a teacher points at through ``tap(name, x)``; with no tap (training, plain inference) nothing
is recorded and the fast paths run. A :class:`Tap` says which names to keep (exact names or glob patterns such
as ``"layer.*.attention.probs"``) and which to replace (``edit``: a function of the tensor that returns the
tensor to use instead, for ablation and patching). Tensors keep their batch dimension: ``(B, T, D)`` etc.

:func:`tensor_names` lists every name a config produces, with its shape and the line that computes it
(docs/TENSORS.md is generated from it).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from torch import Tensor

Edit = Callable[[Tensor], Tensor]


class Tap:
    """What one forward pass records (``read``) and replaces (``edit``); the kept tensors land in ``cache``.

    ``read``: names or glob patterns ("*" = everything). ``edit``: {exact name: fn(tensor) -> tensor}; an edit
    runs before the tensor is recorded, so the cache holds what the rest of the forward pass used. The cache holds
    detached tensors (as TransformerLens's ``run_with_cache``); an edit sees the live one.
    """

    def __init__(self, read: Iterable[str] | str = (), edit: dict[str, Edit] | None = None):
        self.patterns: list[str] = [read] if isinstance(read, str) else list(read)
        self.edit: dict[str, Edit] = dict(edit or {})
        self.cache: dict[str, Tensor] = {}
        self._reads: dict[str, bool] = {}

    def read_also(self, patterns: Iterable[str]) -> Tap:
        """Keep these names (or patterns) too; returns self."""
        self.patterns.extend(patterns)
        self._reads.clear()
        return self

    def reads(self, name: str) -> bool:
        hit = self._reads.get(name)
        if hit is None:
            hit = self._reads[name] = any(p == name or fnmatchcase(name, p) for p in self.patterns)
        return hit

    def touches(self, names: Iterable[str]) -> bool:
        """Whether any of ``names`` is read or replaced (a module then takes its readable path)."""
        return any(n in self.edit or self.reads(n) for n in names)

    def __call__(self, name: str, x: Tensor) -> Tensor:
        fn = self.edit.get(name)
        if fn is not None:
            x = fn(x)
        if self.reads(name):
            self.cache[name] = x.detach()
        return x


def tap_or_none(tap: Tap | None, name: str, x: Tensor) -> Tensor:
    """``tap(name, x)``, or ``x`` when there is no tap."""
    return x if tap is None else tap(name, x)


@dataclass(frozen=True)
class TensorName:
    name: str
    shape: str  # with the batch dimension, e.g. "(B, H, T, T)"
    what: str  # the formula, in words
    where: str  # the bertcore module.function that computes it


ATTENTION_CORE = ("query", "key", "value", "scores", "scaled", "masked", "probs", "context")


def tensor_names(config, layers: Iterable[int] | None = None) -> list[TensorName]:
    """Every named tensor of a forward pass of a model with ``config``, in the order it is computed
    (``layers``: which encoder layers to list, all by default)."""
    c = config
    out = [TensorName("embeddings.token", "(B, T, D)", "E[x]" + (" · √D" if c.embedding_scale else ""),
                      "layers.BertEmbeddings.forward"),
           TensorName("embeddings.position", "(B, T, D)",
                      "P[t], learned" if c.position_embedding == "learned" else "PE(t), sinusoidal (Vaswani §3.5)",
                      "layers.BertEmbeddings.forward")]
    if c.type_vocab_size:
        out.append(TensorName("embeddings.segment", "(B, T, D)", "S[segment]", "layers.BertEmbeddings.forward"))
    out.append(TensorName("embeddings.sum", "(B, T, D)", "token + position" + (" + segment" if c.type_vocab_size
                                                                              else ""), "layers.BertEmbeddings.forward"))
    out.append(TensorName("embeddings.output", "(B, T, D)", "LayerNorm(sum)" if c.embedding_layer_norm else "sum",
                          "layers.BertEmbeddings.forward"))
    for i in (range(c.num_hidden_layers) if layers is None else layers):
        p = f"layer.{i}"
        out += [
            TensorName(f"{p}.attention.query", "(B, H, T, Dh)", "x W_Q + b_Q, split into heads",
                       "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.key", "(B, H, T, Dh)", "x W_K + b_K", "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.value", "(B, H, T, Dh)", "x W_V + b_V",
                       "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.scores", "(B, H, T, T)", "Q Kᵀ", "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.scaled", "(B, H, T, T)", "Q Kᵀ / √d_k", "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.masked", "(B, H, T, T)", "scaled, padded keys set to -inf",
                       "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.probs", "(B, H, T, T)", "softmax(masked) over keys",
                       "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.context", "(B, H, T, Dh)", "Dropout(probs) V",
                       "attention.BertSelfAttention.readable"),
            TensorName(f"{p}.attention.output", "(B, T, D)", "Concat(heads) W_O + b_O", "layers.Residual.forward"),
            TensorName(f"{p}.attention.ln_input", "(B, T, D)", _ln_input(c.norm_placement, "attention"),
                       "layers.Residual.norm"),
            TensorName(f"{p}.attention.ln_output", "(B, T, D)", "LayerNorm(ln_input)", "layers.Residual.norm"),
            TensorName(f"{p}.attention.residual", "(B, T, D)", _residual(c.norm_placement),
                       "layers.BertAttention.forward"),
            TensorName(f"{p}.ffn.pre_activation", "(B, T, F)", "h W_1 + b_1", "layers.BertIntermediate.forward"),
            TensorName(f"{p}.ffn.intermediate", "(B, T, F)", f"{c.hidden_act}(h W_1 + b_1)",
                       "layers.BertIntermediate.forward"),
            TensorName(f"{p}.ffn.output", "(B, T, D)", "intermediate W_2 + b_2", "layers.Residual.forward"),
            TensorName(f"{p}.ffn.ln_input", "(B, T, D)", _ln_input(c.norm_placement, "ffn"), "layers.Residual.norm"),
            TensorName(f"{p}.ffn.ln_output", "(B, T, D)", "LayerNorm(ln_input)", "layers.Residual.norm"),
            TensorName(f"{p}.output", "(B, T, D)", _residual(c.norm_placement).replace("attention", "ffn")
                       + (", then dropout" if c.block_dropout else ""), "layers.BertLayer.forward"),
        ]
    out.append(TensorName("encoder.output", "(B, T, D)", "LayerNorm(last layer output)" if c.final_layer_norm
                          else "the last layer's output", "layers.BertEncoder.forward"))
    out.append(TensorName("pooler.output", "(B, D)", "tanh(W h_[CLS] + b)" if c.nsp_head == "pooler" else "h_[CLS]",
                          "bert.BertModel.forward"))
    if c.mlm_head in ("transform", "mlp"):
        out.append(TensorName("mlm.transform", "(B, T, D)", "LayerNorm(act(W h + b))",
                              "bert.BertLMPredictionHead.forward"))
    out.append(TensorName("mlm.logits", "(B, T, V)", {"transform": "transform E_wordᵀ + b", "linear": "h W + b",
                                                      "mlp": "transform W_2 + b_2"}[c.mlm_head],
                          "bert.BertLMPredictionHead.forward"))
    out.append(TensorName("nsp.logits", "(B, 2)", "pooled W + b", "bert.BertPreTrainingHeads.forward"))
    return out


def _ln_input(placement: str, part: str) -> str:
    sub = "Concat(heads) W_O" if part == "attention" else "FFN"
    if placement == "post":
        return f"x + Dropout({sub}(x))"
    if placement == "pre":
        return "x (the sublayer's input)"
    return f"Dropout({sub}(x))"


def _residual(placement: str) -> str:
    if placement == "post":
        return "LayerNorm(x + Dropout(attention output))"
    if placement == "pre":
        return "x + Dropout(attention(LayerNorm(x)))"
    return "x + LayerNorm(Dropout(attention output))"
