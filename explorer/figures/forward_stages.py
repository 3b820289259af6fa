"""The stages of one forward pass (the "Inside the model" page): the one table of what each stage shows.

Each :class:`Stage` names the tensors of ``bertcore.analysis.trace`` it draws (``{L}`` = the chosen layer), the
bertcore function that computes them and where the seed tutorials compute the same thing, by seed file and class or
function (names only, checked against the seed texts by tests/test_forward_page.py). :func:`stage_formula` writes a
stage's formula from the active model's config (BERT §3, Vaswani et al. 2017 §3.2-3.5); :func:`absent_reason` says
why a stage does not exist in a model; :func:`stage_matrix` takes the stage's matrix out of a Trace (the chosen head
of a per-head tensor), so the page shows exactly the traced numbers. No streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertcore.model.formulas import (activation_formula, activation_name, layer_norm_formula, mask_cases,
                                     mlm_formula, nsp_formula)
from bertcore.presets import PRESETS, TUTORIAL_FILES
from explorer.i18n import mark, tr


@dataclass(frozen=True)
class TutorialRef:
    tutorial: str  # the tutorial file's number in ../shared/seeds, "000" ... "004"
    code: str  # its class, function or file, e.g. "Attention.forward", "attention()"
    part: str = ""  # a name inside it, e.g. "self.position"


@dataclass(frozen=True)
class Stage:
    id: str
    title: str  # English (mark), shown with tr()
    group: str  # embeddings | attention | ffn | layer | heads
    tensors: tuple[str, ...]  # trace names; {L} = the chosen layer
    where: str  # the bertcore function that computes it
    tutorials: tuple[TutorialRef, ...]


_S = TutorialRef
_EMB = "bertcore.model.layers.BertEmbeddings.forward"
_ATT = "bertcore.model.attention.BertSelfAttention.readable"
_A = "layer.{L}.attention."
_F = "layer.{L}.ffn."
STAGES: tuple[Stage, ...] = (
    Stage("token", mark("Token embedding"), "embeddings", ("embeddings.token",), _EMB,
          (_S("000", "BERTEmbedding.forward", "self.token"), _S("001", "BertEmbedding.forward", "word_embeddings"),
           _S("002", "Embeddings.forward", "lut"), _S("004", "BERTEncoder.forward", "token_embedding"))),
    Stage("position", mark("Position embedding"), "embeddings", ("embeddings.position",), _EMB,
          (_S("000", "BERTEmbedding.forward", "self.position"), _S("003", "bert/model/embedding/position.py", "pe"),
           _S("001", "BertEmbedding.forward", "position_embeddings"), _S("002", "PositionalEncoding", "pe"),
           _S("004", "BERTEncoder.forward", "pos_embedding.data"))),
    Stage("segment", mark("Segment embedding"), "embeddings", ("embeddings.segment",), _EMB,
          (_S("000", "BERTEmbedding.forward", "self.segment"), _S("003", "bert/model/embedding/segment.py"),
           _S("001", "BertEmbedding.forward", "token_type_embeddings"),
           _S("004", "BERTEncoder.forward", "segment_embedding"))),
    Stage("sum", mark("Sum of the embeddings"), "embeddings", ("embeddings.sum",), _EMB,
          (_S("000", "BERTEmbedding.forward"), _S("001", "BertEmbedding.forward", "emb"),
           _S("002", "PositionalEncoding.forward"), _S("004", "BERTEncoder.forward", "X"))),
    Stage("emb_norm", mark("Embedding LayerNorm"), "embeddings", ("embeddings.sum", "embeddings.output"), _EMB,
          (_S("001", "BertEmbedding.forward", "self.LayerNorm"),)),
    Stage("attn_norm_before", mark("LayerNorm before attention (pre-norm)"), "attention",
          (_A + "ln_input", _A + "ln_output"), "bertcore.model.layers.Residual.normalize_input",
          (_S("000", "SublayerConnection.forward", "self.norm"), _S("000", "LayerNorm.forward"),
           _S("002", "SublayerConnection.forward", "self.norm"))),
    Stage("qkv", mark("Q, K, V of the head"), "attention", (_A + "query", _A + "key", _A + "value"), _ATT,
          (_S("000", "MultiHeadedAttention.forward", "linear_layers"),
           _S("002", "MultiHeadedAttention.forward", "linears"), _S("001", "BertEncoder.forward", "multi_head_att"))),
    Stage("scores", mark("Scores QKᵀ"), "attention", (_A + "scores",), _ATT,
          (_S("000", "Attention.forward", "scores"), _S("002", "attention()", "scores"))),
    Stage("scaled", mark("Scaled by 1/√d_k"), "attention", (_A + "scaled",), _ATT,
          (_S("000", "Attention.forward", "scores"), _S("002", "attention()", "d_k"))),
    Stage("masked", mark("Padding mask"), "attention", (_A + "masked",), _ATT,
          (_S("000", "Attention.forward", "masked_fill"), _S("003", "bert/model/bert.py/BERT", "mask"),
           _S("002", "attention()", "masked_fill"), _S("004", "BERTEncoder.forward", "valid_lens"))),
    Stage("softmax", mark("Softmax (rows sum to 1)"), "attention", (_A + "probs",), _ATT,
          (_S("000", "Attention.forward", "p_attn"), _S("002", "attention()", "p_attn"))),
    Stage("attn_dropout", mark("Attention dropout"), "attention", (_A + "probs",), _ATT,
          (_S("000", "Attention.forward", "dropout"), _S("002", "attention()", "dropout"))),
    Stage("context", mark("Weighted sum of the values (× V)"), "attention", (_A + "context",), _ATT,
          (_S("000", "Attention.forward", "p_attn"), _S("002", "attention()", "p_attn"))),
    Stage("concat", mark("Heads concatenated"), "attention", (_A + "context",),
          "bertcore.model.attention.BertSelfAttention.readable",
          (_S("000", "MultiHeadedAttention.forward", "transpose"), _S("002", "MultiHeadedAttention.forward", "view"))),
    Stage("w_o", mark("Output projection W^O"), "attention", (_A + "output",), "bertcore.model.layers.Residual.forward",
          (_S("000", "MultiHeadedAttention.forward", "output_layer"),
           _S("002", "MultiHeadedAttention.forward", "linears[-1]"))),
    Stage("attn_add_norm", mark("Residual and LayerNorm (attention)"), "attention",
          (_A + "ln_input", _A + "ln_output", _A + "residual"), "bertcore.model.layers.Residual.forward",
          (_S("000", "SublayerConnection.forward"), _S("001", "BertEncoder.forward", "add_norm1"),
           _S("002", "EncoderLayer.forward", "sublayer[0]"), _S("004", "BERTEncoder.__init__", "d2l.EncoderBlock"))),
    Stage("ffn_norm_before", mark("LayerNorm before the FFN (pre-norm)"), "ffn", (_F + "ln_input", _F + "ln_output"),
          "bertcore.model.layers.Residual.normalize_input",
          (_S("000", "SublayerConnection.forward", "self.norm"), _S("002", "EncoderLayer.forward", "sublayer[1]"))),
    Stage("ffn_w1", mark("FFN: first linear W₁"), "ffn", (_F + "pre_activation",),
          "bertcore.model.layers.BertIntermediate.forward",
          (_S("000", "PositionwiseFeedForward.forward", "w_1"), _S("002", "PositionwiseFeedForward.forward", "w_1"),
           _S("001", "BertEncoder.forward", "feed_forward"))),
    Stage("ffn_act", mark("FFN: activation"), "ffn", (_F + "intermediate",),
          "bertcore.model.layers.BertIntermediate.forward",
          (_S("000", "GELU.forward"), _S("000", "PositionwiseFeedForward.forward", "activation"),
           _S("002", "PositionwiseFeedForward.forward", "F.relu"))),
    Stage("ffn_w2", mark("FFN: second linear W₂"), "ffn", (_F + "output",), "bertcore.model.layers.Residual.forward",
          (_S("000", "PositionwiseFeedForward.forward", "w_2"), _S("002", "PositionwiseFeedForward.forward", "w_2"))),
    Stage("ffn_add_norm", mark("Residual and LayerNorm (FFN)"), "ffn", (_F + "ln_input", _F + "ln_output",
                                                                         "layer.{L}.output"),
          "bertcore.model.layers.BertLayer.forward",
          (_S("000", "SublayerConnection.forward"), _S("001", "BertEncoder.forward", "add_norm2"),
           _S("002", "EncoderLayer.forward", "sublayer[1]"), _S("004", "BERTEncoder.__init__", "d2l.EncoderBlock"))),
    Stage("next_layer", mark("Next layer"), "layer", ("layer.{L}.output", "encoder.output"),
          "bertcore.model.layers.BertEncoder.forward",
          (_S("001", "BertModel.forward", "bert_layer"), _S("002", "Encoder.forward", "self.norm"),
           _S("004", "BERTEncoder.forward", "blks"))),
    Stage("mlm", mark("MLM head: top-k at a [MASK]"), "heads", ("mlm.transform", "mlm.logits"),
          "bertcore.model.bert.BertLMPredictionHead.forward",
          (_S("000", "MaskedLanguageModel.forward"), _S("001", "Model.forward", "cls_mask"), _S("002", "Generator"),
           _S("004", "MaskLM.forward", "mlp"))),
    Stage("nsp", mark("NSP from the pooled [CLS]"), "heads", ("pooler.output", "nsp.logits"),
          "bertcore.model.bert.BertModel.forward",
          (_S("000", "NextSentencePrediction.forward"), _S("001", "BertModel.forward", "self.pool"),
           _S("001", "Model.forward", "cls_next"), _S("004", "BERTModel.forward", "self.hidden"),
           _S("004", "NextSentencePred.forward"))),
)
STAGE = {s.id: s for s in STAGES}
IDS = [s.id for s in STAGES]
PER_HEAD = {"qkv", "scores", "scaled", "masked", "softmax", "attn_dropout", "context"}
SQUARE = {"scores", "scaled", "masked", "softmax", "attn_dropout"}  # (T, T): rows = queries, columns = keys
# The design switches that decide what a forward pass computes (a preset's sizes, dropout rates, eps and init aside).
DESIGN = ("position_embedding", "train_position_embeddings", "norm_placement", "final_layer_norm", "layer_norm_style",
          "embedding_scale", "embedding_layer_norm", "hidden_act", "ffn_dropout", "block_dropout",
          "attention_padding_mask", "segment_ids", "type_vocab_size", "mlm_head", "nsp_head")


def names(stage: Stage, layer: int) -> list[str]:
    return [n.replace("{L}", str(layer)) for n in stage.tensors]


def matching_preset(config) -> str | None:
    """The preset whose design (bertcore.presets) the config has, or None."""
    for name, (over, _) in PRESETS.items():
        if all(getattr(config, k) == over[k] for k in DESIGN if k in over):
            return name
    return None


def design_tutorials(config) -> tuple[str, ...]:
    """The tutorial files whose design the active model follows (empty for BERT's own design or a custom one)."""
    name = matching_preset(config)
    return tuple(TUTORIAL_FILES.get(name) or ()) if name else ()


def absent_reason(stage_id: str, config, model=None) -> str | None:
    """Why ``stage_id`` computes nothing in this model (a sentence for the page), or None."""
    c = config
    place = {"post": tr("post-norm: LayerNorm after the residual sum"),
             "sublayer_output": tr("LayerNorm on the sublayer's output, then the residual sum")}.get(c.norm_placement)
    if stage_id == "segment" and not c.type_vocab_size:
        return tr("This model has no segment embedding (type_vocab_size = 0, as the Annotated Transformer's "
                  "embeddings): the sum is token + position only.")
    if stage_id == "emb_norm" and not c.embedding_layer_norm:
        return tr("This model has no LayerNorm on the embedding sum (BERT-pytorch, the Annotated Transformer and d2l "
                  "have none): layer 1 reads the sum itself, shown below.")
    if stage_id in ("attn_norm_before", "ffn_norm_before") and place:
        after = STAGE["attn_add_norm" if stage_id.startswith("attn") else "ffn_add_norm"]
        return tr("This model normalizes after the sublayer ({placement}), so nothing happens before it: the "
                  "LayerNorm is at the stage \"{stage}\".", placement=place, stage=tr(after.title))
    if stage_id == "mlm" and model is not None and not getattr(model, "has_mlm_head", True):
        return tr("This model has no MLM head: it was published as a bare encoder (all-MiniLM-L6-v2 comes without "
                  "one), so nothing predicts a [MASK] here. Its encoder output is the last stage that exists.")
    if stage_id == "nsp" and model is not None and not getattr(model, "has_nsp_head", True):
        if getattr(model, "sentence_task", "nsp") == "none":
            return tr("This model was pretrained with masked LM alone (sentence_task = none, as RoBERTa), so its "
                      "sentence head never trained and says nothing about the pair; the pooled vector is shown.")
        return tr("This model has no NSP head (it was published without one), so it does not say whether B follows "
                  "A; the pooled [CLS] vector is shown.")
    return None


def stage_title(stage: Stage, config) -> str:
    """The stage's title as the page shows it (translated): the mask stage of a left-to-right model is the causal
    mask, the MLM stage its next-token head."""
    if getattr(config, "causal", False):
        if stage.id == "masked":
            return tr("Causal mask (and padding)")
        if stage.id == "mlm":
            return tr("LM head: the next token")
        if stage.id == "nsp":
            return tr("Sentence head at the last token")
    return tr(stage.title)


def dims(config, n_tokens: int) -> dict:
    c = config
    return {"T": n_tokens, "D": c.hidden_size, "H": c.num_attention_heads, "dk": c.head_dim,
            "F": c.intermediate_size, "V": c.vocab_size, "P": c.max_position_embeddings}


def _shape(*parts) -> str:
    return r"\in \mathbb{R}^{" + r" \times ".join(str(p) for p in parts) + "}"


def _sublayer(c, x: str, sub: str, out: str) -> str:
    """The residual connection around one sublayer (input ``x``, output ``sub``) with the model's LayerNorm
    placement."""
    return {"post": rf"{out} = \mathrm{{LN}}\big({x} + \mathrm{{Dropout}}({sub})\big)",
            "pre": rf"{out} = {x} + \mathrm{{Dropout}}({sub})",
            "sublayer_output": rf"{out} = {x} + \mathrm{{LN}}\big(\mathrm{{Dropout}}({sub})\big)"}[c.norm_placement]


def stage_formula(stage_id: str, config, tokenizer=None, n_tokens: int = 1, head: int = 0) -> str:
    """The stage's formula as LaTeX, written from the active model's config, with its shapes."""
    c, d = config, dims(config, n_tokens)
    T, D, dk, F, V = d["T"], d["D"], d["dk"], d["F"], d["V"]
    h = head + 1
    x = r"\mathrm{LN}(x)" if c.norm_placement == "pre" else "x"
    if stage_id == "token":
        scale = r"\sqrt{D}\," if c.embedding_scale else ""
        return rf"e_t = {scale}E_{{\mathrm{{tok}}}}[x_t],\quad E_{{\mathrm{{tok}}}} {_shape(V, D)},\quad e {_shape(T, D)}"
    if stage_id == "position":
        if c.position_embedding == "learned":
            how = r"\text{learned}" if c.train_position_embeddings else r"\text{fixed } \mathcal{N}(0,1)\text{, never trained}"
            return rf"p_t = P[t],\quad P {_shape(d['P'], D)}\ ({how}),\quad p {_shape(T, D)}"
        return (r"p_{t,2i} = \sin\!\big(t / 10000^{2i/D}\big),\quad p_{t,2i+1} = \cos\!\big(t / 10000^{2i/D}\big),"
                rf"\quad p {_shape(T, D)}")
    if stage_id == "segment":
        if not c.type_vocab_size:
            return r"\text{no segment embedding}"
        ids = r"s_t \in \{1, 2\}\ (0 = \text{padding})" if c.segment_ids == "1/2" else r"s_t \in \{0, 1\}"
        return rf"g_t = S[s_t],\quad S {_shape(c.type_vocab_size, D)},\quad {ids}"
    if stage_id == "sum":
        return r"h_t = e_t + p_t" + (" + g_t" if c.type_vocab_size else "") + rf",\quad h {_shape(T, D)}"
    if stage_id == "emb_norm":
        if not c.embedding_layer_norm:
            return r"x^{(0)} = h" + (r"\ (\text{dropout off in eval})" if c.embedding_dropout else "")
        drop = r"\mathrm{Dropout}\big(\mathrm{LN}(h)\big)" if c.embedding_dropout else r"\mathrm{LN}(h)"
        return rf"x^{{(0)}} = {drop};\quad " + layer_norm_formula(c)
    if stage_id in ("attn_norm_before", "ffn_norm_before"):
        return r"\tilde x = \mathrm{LN}(x);\quad " + layer_norm_formula(c)
    if stage_id == "qkv":
        return (rf"Q^{{({h})}} = {x}\,W_Q^{{({h})}} + b_Q^{{({h})}},\ K^{{({h})}} = {x}\,W_K^{{({h})}} + b_K^{{({h})}},\ "
                rf"V^{{({h})}} = {x}\,W_V^{{({h})}} + b_V^{{({h})}};\quad ({T} \times {D})\,({D} \times {dk}) \to "
                rf"{T} \times {dk},\ d_k = D / H = {dk}")
    if stage_id == "scores":
        return rf"S^{{({h})}} = Q^{{({h})}} K^{{({h})\top}};\quad ({T} \times {dk})\,({dk} \times {T}) \to {T} \times {T}"
    if stage_id == "scaled":
        return rf"\frac{{S^{{({h})}}}}{{\sqrt{{d_k}}}} = \frac{{S^{{({h})}}}}{{\sqrt{{{dk}}}}} = \frac{{S^{{({h})}}}}{{{np.sqrt(dk):.4g}}}"
    if stage_id == "masked":
        if c.causal:  # a left-to-right model: the upper triangle is masked too (bertcore.model.formulas.mask_cases)
            return r"\tilde S_{ij} = \frac{S_{ij}}{\sqrt{d_k}} + M_{ij},\quad " + mask_cases(c)
        if c.attention_padding_mask:
            return (r"\tilde S_{ij} = \frac{S_{ij}}{\sqrt{d_k}} + M_{ij},\quad M_{ij} = "
                    r"\begin{cases} -\infty & \text{key } j \text{ is padding} \\ 0 & \text{otherwise} \end{cases}")
        return r"\tilde S_{ij} = \frac{S_{ij}}{\sqrt{d_k}}\quad (\text{no padding mask: padded keys are attended})"
    if stage_id == "softmax":
        return (r"A_{ij} = \frac{\exp \tilde S_{ij}}{\sum_{k} \exp \tilde S_{ik}},\quad \sum_j A_{ij} = 1,\quad "
                rf"A^{{({h})}} {_shape(T, T)}")
    if stage_id == "attn_dropout":
        p = c.attention_probs_dropout_prob
        return (rf"\mathrm{{Dropout}}_{{p={p:g}}}(A)_{{ij}} = \begin{{cases}} 0 & \text{{with probability }} p \\ "
                r"A_{ij} / (1 - p) & \text{otherwise} \end{cases}\ \text{in training};\quad = A \text{ in eval}")
    if stage_id == "context":
        return (rf"C^{{({h})}} = \mathrm{{Dropout}}(A^{{({h})}})\,V^{{({h})}};\quad ({T} \times {T})\,({T} \times {dk}) "
                rf"\to {T} \times {dk}")
    if stage_id == "concat":
        return rf"C = [C^{{(1)}}; \dots; C^{{({d['H']})}}] {_shape(T, D)},\quad H \cdot d_k = {d['H']} \cdot {dk} = {D}"
    if stage_id == "w_o":
        return rf"O = C\,W^O + b^O;\quad ({T} \times {D})\,({D} \times {D}) \to {T} \times {D}"
    if stage_id == "attn_add_norm":
        return _sublayer(c, "x", "O", "x'") + r";\quad " + layer_norm_formula(c)
    if stage_id == "ffn_w1":
        x1 = r"\mathrm{LN}(x')" if c.norm_placement == "pre" else "x'"
        return rf"z = {x1}\,W_1 + b_1;\quad ({T} \times {D})\,({D} \times {F}) \to {T} \times {F}"
    if stage_id == "ffn_act":
        a = rf"a = {activation_name(c)}(z)"
        if c.ffn_dropout:
            a += r"\ (\text{then dropout, off in eval})"
        return a + r";\quad " + activation_formula(c)
    if stage_id == "ffn_w2":
        return rf"f = a\,W_2 + b_2;\quad ({T} \times {F})\,({F} \times {D}) \to {T} \times {D}"
    if stage_id == "ffn_add_norm":
        out = _sublayer(c, "x'", "f", "x''")
        block = r",\quad x^{(l+1)} = \mathrm{Dropout}(x'')" if c.block_dropout else r",\quad x^{(l+1)} = x''"
        return out + block
    if stage_id == "next_layer":
        final = r"h = \mathrm{LN}(x^{(L)})" if c.final_layer_norm else r"h = x^{(L)}"
        return r"x^{(l+1)} \to \text{layer } l + 2 \ \dots\ \to " + final + rf",\quad h {_shape(T, D)}"
    if stage_id == "mlm":
        if c.causal:  # BERT Table 5's LTR: position t predicts token t + 1
            return (mlm_formula(c).split(r",\quad \mathcal{L}")[0] +
                    r",\quad p(x_{t+1} = w \mid x_{\le t}) = \mathrm{softmax}(z_t)_w")
        return mlm_formula(c).split(r",\quad \mathcal{L}")[0] + r",\quad p(w \mid t) = \mathrm{softmax}(z_t)_w"
    if stage_id == "nsp":
        cls = getattr(tokenizer, "cls_token", None) or "[CLS]"
        return nsp_formula(c, cls).split(r" \\ ")[0].replace(r"\begin{gathered}", "")
    raise KeyError(stage_id)


def head_block(t, layer: int, head: int, name: str) -> np.ndarray:
    return np.asarray(t.tensors[f"layer.{layer}.attention.{name}"][head])


def stage_matrix(t, config, stage_id: str, layer: int, head: int) -> tuple[np.ndarray, list[str]] | None:
    """(matrix, column labels) of the stage: rows are the input's tokens (one row for NSP); None when the model
    computes nothing at this stage. The values are the trace's own (a view, not a recomputation)."""
    ts = t.tensors
    p = f"layer.{layer}."
    if stage_id == "qkv":
        q, k, v = (head_block(t, layer, head, n) for n in ("query", "key", "value"))
        cols = [f"{n}{i}" for n in "QKV" for i in range(q.shape[1])]
        return np.concatenate([q, k, v], axis=1), cols
    if stage_id in SQUARE | {"context"}:
        name = {"scores": "scores", "scaled": "scaled", "masked": "masked", "softmax": "probs",
                "attn_dropout": "probs", "context": "context"}[stage_id]
        m = head_block(t, layer, head, name)
        cols = [f"{j} {tok}" for j, tok in enumerate(t.tokens)] if stage_id in SQUARE else \
            [f"d{i}" for i in range(m.shape[1])]
        return m, cols
    if stage_id == "concat":
        c = ts[p + "attention.context"]  # (H, T, dk) -> (T, H*dk): head h is columns h*dk ... (h+1)*dk - 1
        m = np.transpose(c, (1, 0, 2)).reshape(c.shape[1], -1)
        return m, [f"d{i}" for i in range(m.shape[1])]
    name = {"token": "embeddings.token", "position": "embeddings.position", "segment": "embeddings.segment",
            "sum": "embeddings.sum", "emb_norm": "embeddings.output", "attn_norm_before": p + "attention.ln_output",
            "w_o": p + "attention.output", "attn_add_norm": p + "attention.residual",
            "ffn_norm_before": p + "ffn.ln_output", "ffn_w1": p + "ffn.pre_activation",
            "ffn_act": p + "ffn.intermediate", "ffn_w2": p + "ffn.output", "ffn_add_norm": p + "output",
            "next_layer": "encoder.output" if layer == config.num_hidden_layers - 1 else p + "output",
            "mlm": "mlm.logits", "nsp": "pooler.output"}[stage_id]
    if stage_id in ("attn_norm_before", "ffn_norm_before") and config.norm_placement != "pre":
        return None
    if stage_id == "segment" and not config.type_vocab_size:
        return None
    if name not in ts:
        return None
    m = np.asarray(ts[name])
    if m.ndim == 1:
        m = m[None, :]
    return m, [f"d{i}" for i in range(m.shape[1])]


def token_vectors(t, config, layer: int, head: int, token: int) -> list[tuple[str, np.ndarray]]:
    """(stage id, the token's vector) at every stage that gives the token a vector of its own."""
    out = []
    for s in STAGES:
        if s.id in SQUARE or s.id in ("nsp",):
            continue
        mat = stage_matrix(t, config, s.id, layer, head)
        if s.id == "mlm":
            name = "mlm.transform"
            if name not in t.tensors:
                continue
            mat = (np.asarray(t.tensors[name]), [])
        if mat is not None and mat[0].shape[0] > token:
            out.append((s.id, np.asarray(mat[0][token], dtype=np.float64)))
    return out
