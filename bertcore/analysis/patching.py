"""Activation patching (Vig et al. 2020, causal mediation analysis; Meng et al. 2022 §2.1, causal tracing).

Two texts A and B of the same token length, a target given as a right and a wrong word. The readout is
d = logit(right) - logit(wrong) at the (first) [MASK] of A. For every layer l (0 = the embedding output, l = 1..L the
output of layer l, for a pre-norm model with a final LayerNorm layer L includes it) and every position p, A is run
with its hidden state (l, p) replaced by B's; the effect is (d_patched - d_A) / (d_B - d_A): 0 = A's answer, 1 = B's.
Per head: at layer l (1..L), head h's slice of the attention context (softmax(QK^T/sqrt(d_k))V of that head, before
the output projection W^O, i.e. "the head's output" at every position) is replaced by B's.

A model without an MLM head (all-MiniLM-L6-v2) has no logits: the readout is then the final [CLS] hidden state
projected on the direction from A's to B's final [CLS] state, d(h) = h_[CLS] · u with u = (h_B - h_A)/|h_B - h_A|,
so again 0 = A's and 1 = B's state, and the result says "no MLM head".

Runs are batched: one batch per layer (one row per patched position or head), cut into chunks to bound memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from bertcore.analysis.inference import encode_pair, mask_indices
from bertcore.analysis.lens import NO_MLM_HEAD, has_mlm_head, word_id
from bertcore.data.corpus import TOPICS, plural, verb_forms
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode
from bertcore.model.tap import Tap

CHUNK_TOKENS = 1 << 16  # rows x tokens per batched run (bounds the memory of long inputs)
SAME_ANSWER = 1e-6  # |d_B - d_A| below this: the normalised effect is undefined


@dataclass
class PatchResult:
    tokens_a: list
    tokens_b: list
    readout: str  # "logit_diff" or "cls_projection" (no MLM head)
    position: int  # readout position ([MASK] of A, or 0 = [CLS])
    d_a: float  # unpatched readout of A
    d_b: float  # unpatched readout of B
    effect: np.ndarray  # (L+1, T) normalised; layer 0 = embeddings output
    raw: np.ndarray  # (L+1, T) d_patched - d_A
    positions: list  # the patched positions (columns of effect)
    head_effect: np.ndarray | None = None  # (L, H) normalised, layer index 0 = the first encoder layer
    head_raw: np.ndarray | None = None
    notes: list = field(default_factory=list)


def _encode(tokenizer, text: str, max_len: int) -> tuple[list, list, bool]:
    return encode_pair(tokenizer, text, None, max_len)


def state_name(n_layers: int, layer: int) -> str:
    """The named tensor of hidden state ``layer`` (0 = embeddings output, L = the encoder's output, which for a
    pre-norm model with a final LayerNorm includes it)."""
    if layer == 0:
        return "embeddings.output"
    return "encoder.output" if layer == n_layers else f"layer.{layer - 1}.output"


def final_states(model, ids: list, types: list, rows: int = 1, tap: Tap | None = None) -> Tensor:
    """The encoder output (rows, T, D) of ``rows`` copies of one input, with ``tap``'s edits applied."""
    x = torch.tensor([ids], dtype=torch.long).expand(rows, -1)
    t = torch.tensor([types], dtype=torch.long).expand(rows, -1)
    return model.bert(x, t, torch.ones_like(x), tap=tap)[0]


def clean_run(model, ids: list, types: list, heads: bool = False) -> dict:
    """Hidden states 0..L (and with ``heads`` every layer's head contexts) of one unpatched run."""
    names = ["embeddings.output", "layer.*.output", "encoder.output"] + (["layer.*.attention.context"] if heads else [])
    tap = Tap(names)
    final_states(model, ids, types, tap=tap)
    return tap.cache


class _Readout:
    """d(h_L) for a batch of final hidden states (B, T, D) -> (B,)."""

    def __init__(self, model, position: int, right: int | None, wrong: int | None, direction: Tensor | None):
        self.model, self.position, self.right, self.wrong, self.direction = model, position, right, wrong, direction

    def __call__(self, h: Tensor) -> Tensor:
        h = h[:, self.position]  # (B, D)
        if self.direction is not None:
            return h @ self.direction
        logits = self.model.mlm_logits_from(h)[:, [self.right, self.wrong]]  # (B, 2)
        return logits[:, 0] - logits[:, 1]


def _normalise(raw: np.ndarray, d_a: float, d_b: float) -> np.ndarray:
    denom = d_b - d_a
    if abs(denom) < SAME_ANSWER:
        return np.where(np.abs(raw) <= 1e-5 * (1 + abs(d_a)), 0.0, np.nan)
    return raw / denom


def _chunks(n: int, tokens: int):
    size = max(1, CHUNK_TOKENS // max(1, tokens))
    for s in range(0, n, size):
        yield s, min(n, s + size)


def activation_patching(model, tokenizer, text_a: str, text_b: str, right: str | None = None,
                        wrong: str | None = None, heads: bool = False, positions: list | None = None,
                        max_len: int | None = None) -> PatchResult:
    """The layer x position map (and with ``heads`` the layer x head map) of patching B's activations into A."""
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    ids_a, types_a, cut_a = _encode(tokenizer, text_a, limit)
    ids_b, types_b, cut_b = _encode(tokenizer, text_b, limit)
    T = len(ids_a)
    if len(ids_b) != T:
        raise InputError(Message("text A has {n_a} tokens and text B has {n_b} (with [CLS]/[SEP]); patching swaps the "
                                 "state of one position, so both texts need the same number of tokens: change a word "
                                 "for a word the tokenizer keeps whole (e.g. 'cow' -> 'cows'), not for two words",
                                 n_a=len(ids_a), n_b=len(ids_b)))
    mlm = has_mlm_head(model)
    notes = []
    if cut_a or cut_b:
        notes.append(f"the texts were truncated to {limit} tokens")
    if mlm:
        if not right or not wrong:
            raise InputError(Message("give a right and a wrong word (e.g. right 'is', wrong 'are'); the readout is "
                                     "logit(right) - logit(wrong) at the [MASK]"))
        masks = mask_indices(tokenizer, ids_a)
        if not masks:
            raise InputError(Message("text A has no [MASK]; write [MASK] where the right or the wrong word belongs, "
                                     "e.g. 'the cow [MASK] hungry .'"))
        position, r_id, w_id = masks[0], word_id(tokenizer, right), word_id(tokenizer, wrong)
        if r_id == w_id:
            raise InputError(Message("the right and the wrong word are the same token; choose two different words"))
        if len(masks) > 1:
            notes.append(f"text A has {len(masks)} [MASK]s; the readout is the first one (position {position})")
    else:
        position, r_id, w_id = 0, None, None
        notes.append(NO_MLM_HEAD.split(",")[0] + "; the readout is the final [CLS] hidden state projected on the "
                     "direction from A's to B's final [CLS] state (0 = A's state, 1 = B's)")
    cols = list(range(T)) if positions is None else sorted({int(p) for p in positions if 0 <= int(p) < T})
    if not cols:
        raise InputError(Message("no position to patch; choose positions in [0, {last}]", last=T - 1))
    L = int(model.config.num_hidden_layers)
    with eval_mode(model):
        run_a, run_b = clean_run(model, ids_a, types_a, heads), clean_run(model, ids_b, types_b, heads)
        hs_a = [run_a[state_name(L, i)] for i in range(L + 1)]
        hs_b = [run_b[state_name(L, i)] for i in range(L + 1)]
        direction = None
        if not mlm:
            diff = (hs_b[-1][0, 0] - hs_a[-1][0, 0]).float()
            n = float(diff.norm())
            direction = diff / n if n > 0 else diff
        read = _Readout(model, position, r_id, w_id, direction)
        d_a, d_b = float(read(hs_a[-1])[0]), float(read(hs_b[-1])[0])
        raw = np.zeros((L + 1, len(cols)))
        for layer in range(L + 1):
            for s, e in _chunks(len(cols), T):
                pos = torch.tensor(cols[s:e])

                def swap(x, pos=pos, b=hs_b[layer]):  # row r takes B's state at position pos[r]
                    x = x.clone()
                    x[torch.arange(len(pos)), pos] = b[0, pos]
                    return x

                h = final_states(model, ids_a, types_a, e - s, Tap(edit={state_name(L, layer): swap}))
                raw[layer, s:e] = (read(h) - d_a).numpy()
        if SAME_ANSWER <= abs(d_b - d_a) < 0.05:
            notes.append(f"A and B give almost the same answer (d_B - d_A = {d_b - d_a:.4g}); the normalised effect "
                         "divides by that and magnifies small changes; read the raw change too")
        res = PatchResult(list(tokenizer.convert_ids_to_tokens(ids_a)), list(tokenizer.convert_ids_to_tokens(ids_b)),
                          "logit_diff" if mlm else "cls_projection", position, d_a, d_b,
                          _normalise(raw, d_a, d_b), raw, cols, notes=notes)
        if heads:
            res.head_raw = _head_raw(model, ids_a, types_a, run_b, read, d_a)
            res.head_effect = _normalise(res.head_raw, d_a, d_b)
    return res


def focus_positions(tokenizer, text_a: str, text_b: str, max_len: int) -> list:
    """For a long pair: [CLS], the positions where A's and B's tokens differ, and A's [MASK]s (what a page patches
    by default when patching every position would be slow); all positions when the lengths differ."""
    ids_a, ids_b = _encode(tokenizer, text_a, max_len)[0], _encode(tokenizer, text_b, max_len)[0]
    if len(ids_a) != len(ids_b):
        return list(range(len(ids_a)))
    return [i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if i == 0 or x != y or x == tokenizer.mask_id]


def _head_raw(model, ids_a: list, types_a: list, run_b: dict, read, d_a: float) -> np.ndarray:
    """(L, H) d_patched - d_A with one head's context at one layer taken from B (every position)."""
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    T = len(ids_a)
    out = np.zeros((L, H))
    for layer in range(L):
        ctx_b = run_b[f"layer.{layer}.attention.context"]  # (1, H, T, Dh)
        for s, e in _chunks(H, T):
            def swap(ctx, s=s, e=e, ctx_b=ctx_b):  # row r takes B's context of head s + r
                ctx = ctx.clone()
                for row, h in enumerate(range(s, e)):
                    ctx[row, h] = ctx_b[0, h]
                return ctx

            h = final_states(model, ids_a, types_a, e - s, Tap(edit={f"layer.{layer}.attention.context": swap}))
            out[layer, s:e] = (read(h) - d_a).numpy()
    return out


def patch_json(r: PatchResult) -> dict:
    """The CLI's ``patch --json`` answer (layers and positions 0-based; NaN -> null)."""
    def arr(a):
        return None if a is None else [[None if np.isnan(v) else float(v) for v in row] for row in a]

    return {"tokens_a": r.tokens_a, "tokens_b": r.tokens_b, "readout": r.readout, "position": r.position,
            "logit_diff_a": r.d_a, "logit_diff_b": r.d_b, "positions": r.positions, "effect": arr(r.effect),
            "raw": arr(r.raw), "head_effect": arr(r.head_effect), "head_raw": arr(r.head_raw), "notes": r.notes}


def default_pairs(tokenizer, limit: int = 8) -> list:
    """Ready pairs from the built-in grammar (``bertcore.data.corpus``) that ``tokenizer`` keeps word for word:
    (text A, text B, right, wrong) = ("the cow [MASK] hungry .", "the cows [MASK] hungry .", "is", "are"): subject
    number agreement (the grammar's singular is/has vs plural are/have). [] when the vocabulary lacks them."""
    out = []
    for topic in TOPICS.values():
        for animal, adj in zip(topic["animals"], topic["adjs"]):
            if " " in animal:
                continue
            sg, pl = verb_forms("be")
            a, b = f"the {animal} [MASK] {adj} .", f"the {plural(animal)} [MASK] {adj} ."
            if tokenizer.unknown_words(f"the {animal} {plural(animal)} {adj} . {sg} {pl}"):
                continue
            if len(tokenizer.encode(a)) == len(tokenizer.encode(b)) and all(
                    len(tokenizer.encode(w)) == 1 for w in (sg, pl)):
                out.append((a, b, sg, pl))
        if len(out) >= limit:
            break
    return out[:limit]
