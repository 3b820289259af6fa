"""Inference with a pretrained BERT: the two pretraining tasks, run on text typed by a person.

* ``fill_mask``: masked-LM predictions (BERT §3.1) for every ``[MASK]`` in a text.
* ``nsp_probability``: P(IsNext) for a sentence pair (BERT §3.2); label 0 = IsNext as in HF transformers. A model
  pretrained with sentence-order prediction (``model.sentence_task == "sop"``, ALBERT §4.6) gives P(in order) at the
  same index (label 0 = the pair in order); ``sentence_head_label`` names it.
* ``next_tokens``: a left-to-right model (BERT Table 5's LTR) cannot fill a [MASK], since it never sees the right
  side; it predicts the next token of a typed prefix instead (``fill_mask`` refuses it and says so).
* ``inspect_pair``: every intermediate a teacher points at: tokens, segment ids, embedding parts,
  hidden states and the attention probabilities of every head, as numpy arrays.

All functions run under ``torch.inference_mode`` in eval mode (dropout off) and restore the model's
training flag afterwards (``bertcore.model.modes.eval_mode``). Text is cleaned by the one rule for typed text (``bertcore.data.user_text``: control
and format characters become spaces, empty text is refused, very long text is cut) and truncated longest-first to
the model's position table, with ``truncated=True`` reported. Bad input raises ``InputError`` saying how to fix
it; :func:`mask_positions` is the rule for "has a [MASK]" that fill-mask and the Predict page share.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from bertcore.data.pretraining import build_pair
from bertcore.data.user_text import MAX_TEXT_CHARS, clean_text
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode


@dataclass
class MaskPrediction:
    position: int  # index into FillMaskResult.tokens (which include [CLS]/[SEP])
    candidates: list  # [(token, prob)], most probable first


@dataclass
class FillMaskResult:
    tokens: list
    masks: list
    truncated: bool = False


@dataclass
class Inspection:
    tokens: list
    input_ids: list
    segment_ids: list
    attentions: np.ndarray  # float32 [L, H, T, T]
    hidden_states: np.ndarray  # float32 [L+1, T, D]
    embeddings: dict = field(default_factory=dict)  # token/position/segment/sum/normed -> [T, D]
    truncated: bool = False
    sep_index: int = -1
    # The segment-table rows the model really looks up: segment_ids above are the API's token types (0 = A,
    # 1 = B); a model with config segment_ids="1/2" (BERT-pytorch) embeds 1 = A, 2 = B, 0 = padding.
    embedded_segment_ids: list = field(default_factory=list)


def encode_pair(tokenizer, a: str, b: str | None = None, max_len: int | None = None):
    """``[CLS] A [SEP] B [SEP]`` (or ``[CLS] A [SEP]``) ids and segment ids (BERT §3.2 input), truncated.

    Returns ``(ids, type_ids, truncated)``. ``max_len=None`` means no length limit.
    """
    a, cut_a = clean_text(a, "sentence A" if b is not None else "the text")
    a_ids = list(tokenizer.encode(a))
    b_ids: list = []
    cut_b = False
    if b is not None:
        b, cut_b = clean_text(b, "sentence B")
        b_ids = list(tokenizer.encode(b))
    if not a_ids:
        raise InputError(Message("the text gave no tokens; type some words"))
    if b is not None and not b_ids:
        raise InputError(Message("sentence B gave no tokens; type some words"))
    full = len(a_ids) + len(b_ids) + (3 if b is not None else 2)
    limit = full if max_len is None else int(max_len)
    ids, types = build_pair(tokenizer, a_ids, b_ids if b is not None else None, limit)
    return ids, types, cut_a or cut_b or len(ids) < full


def _forward(model, ids, types, **kw):
    dev = next(model.parameters()).device  # a model training on a GPU is asked where it is (the live probe)
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    t = torch.tensor([types], dtype=torch.long, device=dev)
    return model(x, token_type_ids=t, attention_mask=torch.ones_like(x), **kw)


def _max_len(model, max_len):
    return int(max_len) if max_len is not None else int(model.config.max_position_embeddings)


def mask_indices(tokenizer, ids) -> list[int]:
    """The indices of the [MASK] tokens in ``ids`` (a typed ``[MASK]`` or the vocabulary's own ``<mask>``): the one
    rule every [MASK] reader uses (fill-mask, the lens, patching, explain, skills)."""
    m = tokenizer.mask_id
    return [i for i, t in enumerate(ids) if t == m]


def mask_positions(tokenizer, text: str, max_len: int | None = None) -> tuple[list, list, bool, list]:
    """``(ids, type_ids, truncated, positions)`` of ``[CLS] text [SEP]`` and the indices of its ``[MASK]`` tokens,
    as fill-mask feeds it.

    Raises InputError when the text is empty, has no [MASK], or has every [MASK] beyond ``max_len`` tokens.
    """
    ids, types, truncated = encode_pair(tokenizer, text, None, max_len)
    return ids, types, truncated, require_masks(tokenizer, text, ids, truncated, max_len)


def require_masks(tokenizer, text: str, ids: list, truncated: bool, max_len: int | None) -> list:
    """The [MASK] indices of ``ids`` (``text`` encoded), or InputError: no [MASK], or every one cut off."""
    positions = mask_indices(tokenizer, ids)
    if not positions:
        if truncated and tokenizer.mask_id in tokenizer.encode(clean_text(text)[0]):
            limit = f"{max_len} tokens" if max_len is not None else f"{MAX_TEXT_CHARS:,} characters"
            raise InputError(Message("every [MASK] lies beyond the maximum length ({limit}); shorten the text or "
                                     "move [MASK] earlier", limit=limit))
        raise InputError(Message("the text has no [MASK]; write [MASK] where a word should be predicted "
                                 "(or click a word to mask it), e.g. 'the cat [MASK] on the mat'"))
    return positions


NO_MLM = Message("this model has no MLM head (e.g. all-MiniLM-L6-v2 was trained without one); fill-mask needs a "
                 "model with cls.predictions")
LEFT_TO_RIGHT = Message("this is a left-to-right model (attention_direction=left_to_right): it predicts the next "
                        "token from the words on its left and never sees a [MASK]'s right side, so it cannot fill a "
                        "[MASK]; use next_tokens(model, tokenizer, text) (bertcore.analysis.inference), which predicts "
                        "the word after the text (or after the text up to its first [MASK])")
NO_NSP = Message("this model has no NSP head (it was imported without cls.seq_relationship); next-sentence "
                 "prediction needs a BertForPreTraining checkpoint")
NO_SENTENCE_TASK = Message("this model was pretrained with masked LM alone (sentence_task=none, as RoBERTa), so its "
                           "sentence head never trained; next-sentence prediction needs a model pretrained with "
                           "sentence_task=nsp or sop")


def no_sentence_head(model) -> Message:
    """Why ``model`` cannot score a pair: pretrained without a sentence task, or imported without the head."""
    return NO_SENTENCE_TASK if getattr(model, "sentence_task", "nsp") == "none" else NO_NSP


@dataclass
class Prediction:
    """Both pre-training heads on one input, from one forward pass (``predict``)."""

    tokens: list
    masks: list  # [MaskPrediction] at every [MASK]; [] without an MLM head
    p_is_next: float | None  # P(IsNext) (BERT §3.2) when B was given and the model has an NSP head
    truncated: bool = False


def predict(model, tokenizer, a: str, b: str | None = None, top_k: int = 5, head_mask=None,
            max_len: int | None = None, require_mask: bool = False) -> Prediction:
    """The top-k words at every [MASK] (BERT §3.1) and, for a pair, P(IsNext) (§3.2), in one forward pass over
    ``[CLS] a [SEP] (b [SEP])``, the text tokenised once; ``head_mask`` (L, H) switches heads off (0 = off,
    Michel et al. 2019). ``require_mask``: InputError when the text has no [MASK] (fill-mask's rule)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(Message("top_k={top_k} must be a whole number >= 1", top_k=repr(top_k)))
    limit = _max_len(model, max_len)
    causal = bool(getattr(model.config, "causal", False))
    if require_mask and causal:
        raise InputError(LEFT_TO_RIGHT)
    ids, types, truncated = encode_pair(tokenizer, a, b, limit)
    if causal:
        positions = []  # its MLM head predicts the next token at every position, not the word at a [MASK]
    elif require_mask:
        positions = require_masks(tokenizer, a, ids, truncated, limit)
    else:
        positions = mask_indices(tokenizer, ids)
    if not getattr(model, "has_mlm_head", True):
        positions = []
    with eval_mode(model):
        out = _forward(model, ids, types, head_mask=head_mask)
        masks = []
        if positions and out.mlm_logits is not None:
            probs = torch.softmax(out.mlm_logits[0, positions].float(), dim=-1)
            p, idx = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            for pos, pr, ix in zip(positions, p.tolist(), idx.tolist()):
                masks.append(MaskPrediction(pos, list(zip(tokenizer.convert_ids_to_tokens(ix), map(float, pr)))))
        p_next = None
        if b is not None and getattr(model, "has_nsp_head", True) and out.nsp_logits is not None:
            p_next = float(torch.softmax(out.nsp_logits[0].float(), dim=-1)[0])  # label 0 = IsNext
    return Prediction(list(tokenizer.convert_ids_to_tokens(ids)), masks, p_next, truncated)


def fill_mask(model, tokenizer, text: str, top_k: int = 5, max_len: int | None = None) -> FillMaskResult:
    """Top-k tokens with probabilities for every [MASK] in ``text`` (masked LM, BERT §3.1). A left-to-right model
    raises InputError pointing to :func:`next_tokens`."""
    if not getattr(model, "has_mlm_head", True):
        raise InputError(NO_MLM)
    if getattr(model.config, "causal", False):
        raise InputError(LEFT_TO_RIGHT)
    r = predict(model, tokenizer, text, None, top_k, max_len=max_len, require_mask=True)
    return FillMaskResult(r.tokens, r.masks, r.truncated)


def nsp_probability(model, tokenizer, a: str, b: str, max_len: int | None = None) -> float:
    """P(IsNext) that ``b`` follows ``a`` (next sentence prediction, BERT §3.2); for a model pretrained with
    sentence-order prediction (ALBERT §4.6) P(in order): label 0 in both."""
    if not getattr(model, "has_nsp_head", True):
        raise InputError(no_sentence_head(model))
    if b is None:
        raise InputError(Message("sentence B is missing; NSP scores a pair of sentences"))
    return predict(model, tokenizer, a, b, max_len=max_len).p_is_next


def sentence_head_label(model) -> str:
    """What the sentence head's label-0 probability means for this model: "P(in order)" after sentence-order
    prediction (``sentence_task`` sop, ALBERT §4.6), else "P(IsNext)" (BERT §3.2)."""
    return "P(in order)" if getattr(model, "sentence_task", "nsp") == "sop" else "P(IsNext)"


@dataclass
class NextTokens:
    """A left-to-right model's guess for the token after a prefix (``next_tokens``)."""

    tokens: list  # the model input: [CLS] prefix [SEP] (the [SEP] comes after the read position, so it is unseen)
    position: int  # the index in ``tokens`` whose output is read: the prefix's last token ([CLS] for no prefix)
    candidates: list  # [(token, prob)], most probable first
    cut_at_mask: bool = False  # the text held a [MASK]: the prefix is the text before the first one
    truncated: bool = False


def next_tokens(model, tokenizer, text: str, top_k: int = 5, max_len: int | None = None) -> NextTokens:
    """The top-k next tokens after ``text`` for a left-to-right model (BERT Table 5's LTR: it was trained with
    labels[t] = ids[t + 1]). The model reads ``[CLS] prefix [SEP]``; under its causal mask the output at the
    prefix's last token sees only the prefix, so it is the next-token distribution. A text with a [MASK] is read
    up to the first one, so the answer is the model's guess for that word from its left context alone."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(Message("top_k={top_k} must be a whole number >= 1", top_k=repr(top_k)))
    if not getattr(model, "has_mlm_head", True):
        raise InputError(NO_MLM)
    if not getattr(model.config, "causal", False):
        raise InputError(Message("this model is bidirectional: it reads both sides of a [MASK] and was not trained "
                                 "to predict the next token; use fill_mask with a [MASK] in the text"))
    cleaned, cut_text = clean_text(text, "the text")
    ids_all = list(tokenizer.encode(cleaned))
    if not ids_all:
        raise InputError(Message("the text gave no tokens; type some words"))
    masks = mask_indices(tokenizer, ids_all)
    prefix = ids_all[:masks[0]] if masks else ids_all
    limit = _max_len(model, max_len)
    ids, types = build_pair(tokenizer, prefix, None, limit)
    position = len(ids) - 2  # the last token before the closing [SEP] ([CLS] itself for an empty prefix)
    with eval_mode(model):
        out = _forward(model, ids, types)
        probs = torch.softmax(out.mlm_logits[0, position].float(), dim=-1)
        p, idx = probs.topk(min(top_k, probs.shape[-1]))
    cands = list(zip(tokenizer.convert_ids_to_tokens(idx.tolist()), map(float, p.tolist())))
    return NextTokens(list(tokenizer.convert_ids_to_tokens(ids)), position, cands, bool(masks),
                      cut_text or len(ids) < len(prefix) + 2)


def inspect_pair(model, tokenizer, a: str, b: str | None = None, max_len: int | None = None) -> Inspection:
    """Tokens, segment ids, embedding parts, hidden states and all attention probabilities for one input."""
    ids, types, truncated = encode_pair(tokenizer, a, b, _max_len(model, max_len))
    with eval_mode(model):
        out = _forward(model, ids, types, output_attentions=True, output_hidden_states=True,
                       output_embeddings=True)
        att = torch.stack([x[0] for x in out.attentions]).float().numpy()
        hs = torch.stack([x[0] for x in out.hidden_states]).float().numpy()
        emb = {k: v[0].float().numpy() for k, v in (out.embeddings or {}).items() if v is not None}
    # the A/B boundary is the [SEP] just before segment 1 (a [SEP] typed inside A is not it)
    sep_index = types.index(1) - 1 if 1 in types else len(ids) - 1
    return Inspection(list(tokenizer.convert_ids_to_tokens(ids)), ids, types, att, hs, emb, truncated, sep_index,
                      embedded_segments(model, types))


def embedded_segments(model, types: list) -> list:
    """The segment-table rows ``model`` looks up for the token types of one unpadded input, from the model's own
    ``BertEmbeddings.segment_ids``: 0/1, or 1/2 for segment_ids="1/2"; [] when it has no segment table."""
    if not getattr(model.config, "type_vocab_size", 0):
        return []
    x = torch.tensor([types], dtype=torch.long)
    return model.bert.embeddings.segment_ids(x, torch.ones_like(x))[0].tolist()
