"""The logit lens for a masked LM (nostalgebraist 2020, "interpreting GPT: the logit lens"), made for BERT.

What is applied: at every [MASK], the model's own MLM head (BERT §3.1; ``cls.predictions``: the transform
dense -> activation -> LayerNorm, then the decoder tied to the word embeddings plus its bias) is applied to the hidden
state after each layer, the embedding output being layer 0. For a pre-norm stack with a final LayerNorm
(``config.final_layer_norm``, e.g. the pre-LN presets) that LayerNorm is applied first to layers 0..L-1, because the
head was trained on normed states (the model's own layer L state already includes it). So layer L is exactly
fill-mask (``bertcore.analysis.inference.fill_mask``). A model without MLM weights (all-MiniLM-L6-v2) has no head to
apply: ``logit_lens`` raises ``InputError`` saying so.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bertcore.analysis.inference import mask_positions
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode

NO_MLM_HEAD = Message("this model has no MLM head (e.g. all-MiniLM-L6-v2 was trained without one), so there is "
                      "no vocabulary readout for the logit lens; choose a model trained here or a "
                      "BertForPreTraining/BertForMaskedLM checkpoint")
MAX_TOP_K = 100


@dataclass
class LensResult:
    tokens: list  # [CLS] text [SEP] as the model reads it
    positions: list  # index of each [MASK] in tokens
    top: list  # [mask][layer] -> [(token, prob)], most probable first; layer 0 = embedding output
    word: str | None = None
    word_rank: list | None = None  # [mask][layer] 1-based rank of ``word`` among the whole vocabulary
    word_prob: list | None = None  # [mask][layer] its probability
    applied: str = ""  # what was applied to the hidden states, in words
    truncated: bool = False


def has_mlm_head(model) -> bool:
    return bool(getattr(model, "has_mlm_head", True))


def applied_description(model) -> str:
    """What the lens applies to a hidden state h of this model, in words (shown on the page and in the JSON)."""
    cfg = model.config
    kind = {"transform": Message("W_E · LayerNorm(act(W h + b)) + b_dec (the transform, then the decoder tied to "
                                 "the word embeddings)"),
            "linear": Message("W h + b (one untied linear decoder)"),
            "mlp": Message("W2 LayerNorm(act(W1 h + b1)) + b2 (d2l's MLP head)")}[cfg.mlm_head]
    if getattr(cfg, "final_layer_norm", False):
        return Message("softmax of the encoder's final LayerNorm (this pre-norm model's layer L output already "
                       "includes it), then the model's own MLM head cls.predictions: {kind}", kind=kind)
    return Message("softmax of the model's own MLM head cls.predictions: {kind}", kind=kind)


def lens_logits(model, hidden: Tensor) -> Tensor:
    """MLM logits of hidden states (L+1, ..., D) read as the lens does -> (L+1, ..., V).

    ``hidden[L]`` is the model's last hidden state (already through a final LayerNorm when there is one)."""
    if model.config.final_layer_norm:
        hidden = torch.cat([model.bert.encoder.final_norm(hidden[:-1]), hidden[-1:]])
    return model.mlm_logits_from(hidden)


def word_id(tokenizer, word: str) -> int:
    """The vocabulary id of a one-token word; InputError when it is not one token of this vocabulary."""
    word = (word or "").strip()
    if not word:
        raise InputError(Message("the word is empty; type one word of the model's vocabulary, e.g. 'is'"))
    ids = list(tokenizer.encode(word))
    if len(ids) != 1 or tokenizer.unknown_words(word):
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise InputError(Message("{word} is not one token of this model's vocabulary (it becomes {pieces}); choose a "
                                 "word the vocabulary holds whole", word=repr(word), pieces=str(pieces)))
    return int(ids[0])


def hidden_states(model, ids: list, types: list) -> list:
    """The L+1 hidden states (T, D) of one unpadded input (the embedding output first)."""
    x = torch.tensor([ids], dtype=torch.long)
    out = model(x, token_type_ids=torch.tensor([types], dtype=torch.long), attention_mask=torch.ones_like(x),
                output_hidden_states=True)
    return [h[0] for h in out.hidden_states]


def logit_lens(model, tokenizer, text: str, top_k: int = 5, word: str | None = None,
               max_len: int | None = None) -> LensResult:
    """Top-k words with probabilities at every [MASK] after every layer, and ``word``'s rank and probability."""
    if not has_mlm_head(model):
        raise InputError(NO_MLM_HEAD)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InputError(Message("top_k={top_k} must be a whole number in [1, {limit}]", top_k=repr(top_k),
                                 limit=MAX_TOP_K))
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    ids, types, truncated, positions = mask_positions(tokenizer, text, limit)
    wid = word_id(tokenizer, word) if word else None
    with eval_mode(model):
        hs = torch.stack(hidden_states(model, ids, types))[:, positions]  # (L+1, M, D)
        probs = torch.softmax(lens_logits(model, hs).float(), dim=-1)  # (L+1, M, V)
        p, idx = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (L+1, M, k)
        if wid is not None:
            wp = probs[..., wid]  # (L+1, M)
            rank = (probs > wp[..., None]).sum(-1) + 1  # (L+1, M)
    top = [[list(zip(tokenizer.convert_ids_to_tokens(idx[layer, m].tolist()), map(float, p[layer, m].tolist())))
            for layer in range(p.shape[0])] for m in range(len(positions))]
    res = LensResult(list(tokenizer.convert_ids_to_tokens(ids)), list(positions), top,
                     applied=applied_description(model), truncated=truncated)
    if wid is not None:
        res.word = tokenizer.convert_ids_to_tokens([wid])[0]
        res.word_rank = rank.T.tolist()
        res.word_prob = wp.T.float().tolist()
    return res


def lens_json(r: LensResult) -> dict:
    """The CLI's ``lens --json`` answer: per mask, per layer (0 = embeddings), top-k words and probabilities."""
    out = {"tokens": r.tokens, "applied": r.applied, "truncated": r.truncated, "masks": []}
    for m, pos in enumerate(r.positions):
        entry = {"position": pos, "layers": [
            {"layer": layer, "top": [{"token": t, "prob": q} for t, q in cands]} for layer, cands in enumerate(r.top[m])]}
        if r.word is not None:
            entry["word"] = {"token": r.word, "rank": r.word_rank[m], "prob": r.word_prob[m]}
        out["masks"].append(entry)
    return out
