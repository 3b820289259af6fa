"""What one MLM selection covers, and the left-to-right model's targets: the data side of the objective switches.

* ``whole_word``: a WordPiece word is selected with all its pieces (``##`` continuations), as in BERT's 2019
  whole-word masking. Selection is a Bernoulli draw per *word* at the same corrected rate the token rule uses
  per token (``pretraining._select_prob``), so the expected share of selected tokens stays ``mlm_probability``.
* ``span``: SpanBERT §3.1. Span lengths in words are geometric, P(l) ∝ p (1 - p)^(l - 1) on 1..``span_max_length``
  (p = 0.2, 10: mean 3.8, the truncated distribution SpanBERT's code draws from); a span starts at a random word, stays inside its sentence, and
  spans are added until the budget max(1, round(n · mlm_probability)) tokens is spent (BERT's
  create_pretraining_data.py rounds the same way); the last span is cut to the budget.
* In both, the [MASK] / random / keep choice is made once per unit (SpanBERT: "at the span level"), and a
  random replacement is drawn per token.
* ``next_token_labels``: BERT Table 5's LTR model predicts token t + 1 from position t, at every position whose
  next token is a real word (specials and padding are no targets, as MLM never selects them).

Every rule reads the same four [B, T] uniform draws the token rule reads (``pretraining.apply_masking``), so the
masking unit never changes how much a generator is advanced: the same seed gives the same pairs in the same order.
"""
from __future__ import annotations

import math
import weakref

import numpy as np
import torch

IGNORE = -100
_CONT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def continuation_table(tokenizer) -> torch.Tensor:
    """bool [V]: True for a WordPiece continuation piece (``##...``); all False for a word-level vocabulary."""
    t = _CONT.get(tokenizer)
    if t is None or t.numel() != tokenizer.vocab_size:
        t = torch.tensor([str(w).startswith("##") and len(str(w)) > 2 for w in tokenizer.vocab], dtype=torch.bool)
        _CONT[tokenizer] = t
    return t


def word_starts(ids: torch.Tensor, maskable: torch.Tensor, continuation: torch.Tensor | None) -> torch.Tensor:
    """bool [B, T]: the first piece of each maskable word (a continuation right after a non-maskable token starts
    a word of its own)."""
    if continuation is None:
        return maskable.clone()
    cont = continuation[ids] & maskable
    prev_maskable = torch.zeros_like(maskable)
    prev_maskable[:, 1:] = maskable[:, :-1]
    return maskable & ~(cont & prev_maskable)


def word_index(starts: torch.Tensor, maskable: torch.Tensor) -> torch.Tensor:
    """long [B, T]: the position of the start of the word each maskable token belongs to (-1 elsewhere)."""
    B, T = starts.shape
    pos = torch.arange(T).expand(B, T)
    marked = torch.where(starts, pos, torch.full_like(pos, -1))
    latest = torch.cummax(marked, dim=1).values  # the latest start at or before each position
    return torch.where(maskable, latest, torch.full_like(latest, -1))


def spread(per_start: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """A value chosen at each word's start, copied to every piece of the word (False / 0 where owner is -1)."""
    got = per_start.gather(1, owner.clamp(min=0))
    return torch.where(owner >= 0, got, torch.zeros_like(got))


def geometric_length(u: float, p: float, longest: int) -> int:
    """Inverse CDF of SpanBERT's span length: geometric P(l) ∝ p (1 - p)^(l - 1) on 1..``longest``, renormalised
    (its code draws from the truncated distribution: mean 3.8 at p = 0.2, ``longest`` = 10)."""
    if p >= 1.0:
        return 1
    q = 1.0 - p
    k = math.ceil(math.log1p(-min(max(u, 0.0), 1 - 1e-12) * (1.0 - q ** longest)) / math.log(q))
    return int(min(longest, max(1, k)))


def geometric_pmf(p: float, longest: int) -> list[float]:
    """P(l) for l = 1..longest of the truncated, renormalised geometric (``geometric_length``)."""
    q = 1.0 - p
    z = 1.0 - q ** longest
    return [p * q ** (k - 1) / z for k in range(1, longest + 1)]


def select_spans(starts: torch.Tensor, owner: torch.Tensor, maskable: torch.Tensor, rate: float, p: float,
                 longest: int, u_len: torch.Tensor, u_start: torch.Tensor):
    """SpanBERT's selection (module docstring) of a [B, T] batch -> (selected bool [B, T], unit start long [B, T]:
    the position whose action draw each selected token uses, drawn lengths, realised span lengths in words).

    ``u_start`` orders the candidate start words (a random order), ``u_len[b, k]`` is the k-th span's length
    draw; both come from the batch's uniform draws, so nothing extra is drawn."""
    B, T = starts.shape
    st, ow, mk = starts.numpy(), owner.numpy(), maskable.numpy()
    ul, us = u_len.numpy(), u_start.numpy()
    unit = np.full((B, T), -1, dtype=np.int64)
    drawn: list[int] = []
    realised: list[int] = []
    for b in range(B):
        wp = np.flatnonzero(st[b])  # word starts in reading order
        if wp.size == 0:
            continue
        size = np.bincount(ow[b][mk[b]], minlength=T)[wp]
        adjacent = np.append(wp[:-1] + size[:-1] == wp[1:], False)  # word i + 1 follows word i in one sentence
        budget = max(1, int(round(int(size.sum()) * rate)))
        taken = np.zeros(wp.size, dtype=bool)
        first_of = np.full(wp.size, -1, dtype=np.int64)
        spent, k = 0, 0
        for w0 in np.argsort(us[b, wp], kind="stable").tolist():
            if spent >= budget or k >= T:
                break
            if taken[w0]:
                continue
            length = geometric_length(float(ul[b, k]), p, longest)
            k += 1
            drawn.append(length)
            n, w = 0, w0
            while n < length and not taken[w]:
                if spent + size[w] > budget and (n or spent):
                    break  # the budget is spent: the span is cut here (one word always fits an empty selection)
                taken[w], first_of[w] = True, wp[w0]
                spent += int(size[w])
                n += 1
                if not adjacent[w]:
                    break
                w += 1
            if n:
                realised.append(n)
        words = np.flatnonzero(taken)
        if words.size:
            lut = np.full(T, -1, dtype=np.int64)
            lut[wp[words]] = first_of[words]
            row = np.where(mk[b], lut[np.clip(ow[b], 0, None)], -1)
            unit[b] = row
    unit_t = torch.from_numpy(unit)
    return unit_t >= 0, unit_t, drawn, realised


def next_token_labels(ids: torch.Tensor, target_ok: torch.Tensor) -> torch.Tensor:
    """Left-to-right LM targets (BERT Table 5's LTR): label[t] = ids[t + 1] where that token is a real word
    (``target_ok`` [B, T]: maskable), else -100."""
    labels = torch.full_like(ids, IGNORE)
    labels[:, :-1] = torch.where(target_ok[:, 1:], ids[:, 1:], torch.full_like(ids[:, 1:], IGNORE))
    return labels
