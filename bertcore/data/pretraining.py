"""Pre-training examples: masked LM (BERT §3.1) and next sentence prediction (BERT §3.2).

* Input: ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``;
  a pair longer than the budget is truncated *longest-first*: one token at a time from the end of
  the longer sentence, as in BERT's ``create_pretraining_data.py``.
* MLM (§3.1): ``mlm_probability`` of the non-special tokens are selected, at least one per sequence.
  Each selected token becomes ``[MASK]`` (``mask_token_frac``), a random non-special token
  (``random_token_frac``) or stays unchanged (the rest). Labels are -100 except at selected positions.
  Selection is a Bernoulli draw per token. Because of the at-least-one rule a plain draw at rate p would
  select more than p on short sequences (n·p + (1-p)^n on average), so the per-token probability q is
  lowered until the expected count is exactly n·p (when n·p >= 1; shorter sequences get exactly one).
* NSP (§3.2): with ``nsp_positive_prob`` the true B (label 0 = IsNext), otherwise the B of a *different*
  pair whose B differs from the true one (label 1 = NotNext). The corpus may repeat B sentences, so the
  check compares the sentences, not the pair index. When the corpus names documents (``Corpus.documents``),
  that pair comes from another document, as in BERT's create_pretraining_data (§A.1).
* The objective switches (``TrainConfig.sentence_task``, ``masking_unit``; ``BertConfig.attention_direction``):
  ``sop`` (ALBERT §4.6) keeps each pair's own sentences and swaps A and B for label 1; ``none`` (RoBERTa §4.2)
  packs every pair in order and trains no sentence head; whole-word and span selection are
  ``bertcore.data.masking_units``; a left-to-right model gets next-token targets and no masks.

A seeded ``torch.Generator`` drives every random choice, so the same seed gives the same batches.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import lru_cache

import torch

from bertcore.data import masking_units as U
from bertcore.data.user_text import clean_text, is_blank
from bertcore.errors import ConfigError, CorpusError, InputError
from bertcore.message import Message

IGNORE = -100
UNITS = ("token", "whole_word", "span")
SENTENCE_TASKS = ("nsp", "sop", "none")
_NONE, _MASK, _RANDOM, _KEEP = 0, 1, 2, 3
ACTIONS = ("none", "mask", "random", "keep")
_NEG_TRIES = 8


@dataclass
class MaskingRates:
    """MLM rates (BERT §3.1): select ``mlm_probability`` of tokens; of those ``mask_token_frac`` -> [MASK],
    ``random_token_frac`` -> random token, the rest kept. ``unit``: what one selection covers (token, whole_word,
    span: ``bertcore.data.masking_units``), with SpanBERT's ``span_p`` and ``span_max_length`` for spans."""

    mlm_probability: float = 0.15
    mask_token_frac: float = 0.8
    random_token_frac: float = 0.1
    unit: str = "token"
    span_p: float = 0.2
    span_max_length: int = 10

    def __post_init__(self) -> None:
        for name in ("mlm_probability", "mask_token_frac", "random_token_frac"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ConfigError(Message("{name}={value} must be a number in [0, 1]", name=name, value=repr(v)))
        if self.mask_token_frac + self.random_token_frac > 1.0 + 1e-9:
            raise ConfigError(Message("mask_token_frac + random_token_frac must be <= 1 (the rest are kept); "
                                      "lower one"))
        if self.unit not in UNITS:
            raise ConfigError(Message("masking_unit={value} is not valid; choose one of {choices}",
                                      value=repr(self.unit), choices=", ".join(UNITS)))

    @property
    def keep_frac(self) -> float:
        return max(0.0, 1.0 - self.mask_token_frac - self.random_token_frac)

    @classmethod
    def from_train_config(cls, tc) -> "MaskingRates":
        return cls(tc.mlm_probability, tc.mask_token_frac, tc.random_token_frac, tc.masking_unit, tc.span_p,
                   tc.span_max_length)


@dataclass
class MaskDecision:
    position: int
    original: str
    original_id: int
    selected: bool
    action: str  # "none" | "mask" | "random" | "keep"
    placed: str
    placed_id: int


@dataclass
class Example:
    input_ids: list[int]  # after masking
    token_type_ids: list[int]
    mlm_labels: list[int]
    nsp_label: int  # 0 = IsNext, 1 = NotNext
    decisions: list[MaskDecision] | None
    tokens: list[str]  # tokens of input_ids (after masking)


# ------------------------------------------------------------------ pair building
def build_pair(tokenizer, a_ids, b_ids, max_len: int) -> tuple[list[int], list[int]]:
    """``[CLS] A [SEP] B [SEP]`` (or ``[CLS] A [SEP]`` when ``b_ids`` is None) with segment ids (BERT §3.2 input),
    truncated longest-first to ``max_len`` tokens. The one pair encoder: the training data, inference
    (``bertcore.analysis.inference.encode_pair``) and every page build their inputs with it."""
    return build_ids(tokenizer.cls_id, tokenizer.sep_id, a_ids, b_ids, max_len)


def build_ids(cls_id: int, sep_id: int, a_ids, b_ids, max_len: int) -> tuple[list[int], list[int]]:
    n_special = 2 if b_ids is None else 3
    budget = max_len - n_special
    if budget < 0:
        raise ConfigError(Message("max_len={max_len} cannot hold the {n} special tokens; use max_len >= {min}",
                                  max_len=max_len, n=n_special, min=n_special + 2))
    la, lb = len(a_ids), (0 if b_ids is None else len(b_ids))
    excess = la + lb - budget
    if excess > 0:  # longest-first: trim the longer side from the end; once equal, alternate starting with B
        gap = min(excess, abs(la - lb))
        if la > lb:
            la -= gap
        else:
            lb -= gap
        rest = excess - gap
        lb -= (rest + 1) // 2
        la -= rest // 2
    ids = [cls_id, *a_ids[:la], sep_id]
    types = [0] * (la + 2)
    if b_ids is not None:
        ids += [*b_ids[:lb], sep_id]
        types += [1] * (lb + 1)
    return ids, types


def segment_labels(token_type_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """BERT-pytorch's segment labels: 1 for A, 2 for B, 0 for padding, from 0/1 token types and the padding mask."""
    return (token_type_ids + 1) * attention_mask.to(token_type_ids.dtype)


# ------------------------------------------------------------------ masking
def masking_rule(rates: "MaskingRates | None" = None, mask_token: str = "[MASK]") -> str:
    """The selection rule ``mask_tokens`` follows, in words, for the Masking page (``mask_token``: the
    tokenizer's spelling of the mask)."""
    r = rates or MaskingRates()
    p = r.mlm_probability
    return (f"Each non-special token is selected by a Bernoulli draw; a sequence with n such tokens gets at least one. "
            f"So that the expected count stays n x {p:g}, the per-token rate q solves n q + (1 - q)^n = n x {p:g} "
            f"when n x {p:g} >= 1; when n x {p:g} < 1 exactly one token is selected, so short sequences are selected "
            f"at 1/n > {p:.4g} (BERT's create_pretraining_data.py also selects max(1, round(n x {p:g})) tokens). "
            f"Of the selected: {r.mask_token_frac:.4g} -> {mask_token}, {r.random_token_frac:.4g} -> a random token, "
            f"{r.keep_frac:.4g} kept (BERT §3.1 draws 0.8 / 0.1 / 0.1).")


def expected_selected(n: int, p: float) -> float:
    """Expected number of selected tokens in a sequence with ``n`` maskable tokens at rate ``p`` (the rule above)."""
    if n <= 0:
        return 0.0
    q = _select_prob(n, p)
    return 1.0 if q == 0.0 else n * q + (1 - q) ** n


def expected_selection_rate(lengths, p: float) -> float:
    """Expected share of maskable tokens selected over sequences with ``lengths`` maskable tokens each:
    sum of expected counts / sum of lengths. On short sequences this exceeds ``p`` (the at-least-one rule)."""
    lengths = [int(n) for n in lengths]
    total = sum(lengths)
    return sum(expected_selected(n, p) for n in lengths) / total if total else math.nan


@lru_cache(maxsize=4096)
def _select_prob(n: int, p: float) -> float:
    """q with n*q + (1-q)^n = n*p: the Bernoulli rate that, with the at-least-one fallback, selects n*p
    tokens on average. 0 when n*p <= 1 (then exactly one token is selected)."""
    if n <= 0 or n * p <= 1.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lo, hi = 0.0, p
    for _ in range(60):
        mid = (lo + hi) / 2
        if n * mid + (1 - mid) ** n < n * p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def token_tables(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """(is_special bool[V], pool of non-special ids) cached per tokenizer."""
    t = _TABLES.get(tokenizer)
    if t is None or t[0].numel() != tokenizer.vocab_size:
        special = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
        special[list(tokenizer.special_ids)] = True
        pool = (~special).nonzero().flatten()
        if pool.numel() == 0:
            raise InputError(Message("the vocabulary has only special tokens; build it from some text first"))
        t = (special, pool)
        _TABLES[tokenizer] = t
    return t


def mask_draws(generator: torch.Generator, b: int, t: int, pool: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four [b, t] draws one batch's masking reads (u_sel, u_pick, u_act, rand_ids), in the stream's order."""
    u_sel = torch.rand((b, t), generator=generator)
    u_pick = torch.rand((b, t), generator=generator)
    u_act = torch.rand((b, t), generator=generator)
    rand_ids = pool[torch.randint(pool.numel(), (b, t), generator=generator)]
    return u_sel, u_pick, u_act, rand_ids


def _mask_batch(ids: torch.Tensor, maskable: torch.Tensor, rates: MaskingRates, generator: torch.Generator,
                pool: torch.Tensor, mask_id: int, continuation: torch.Tensor | None = None, stats: dict | None = None):
    """Vectorized MLM masking of a [B, T] batch -> (masked ids, labels, action codes)."""
    b, t = ids.shape
    return apply_masking(ids, maskable, rates, *mask_draws(generator, b, t, pool), mask_id, continuation, stats)


def apply_masking(ids: torch.Tensor, maskable: torch.Tensor, rates: MaskingRates, u_sel: torch.Tensor,
                  u_pick: torch.Tensor, u_act: torch.Tensor, rand_ids: torch.Tensor, mask_id: int,
                  continuation: torch.Tensor | None = None, stats: dict | None = None):
    """MLM masking (BERT §3.1) of a [B, T] batch from given uniforms -> (masked ids, labels, action codes).

    ``u_sel`` decides selection, ``u_pick`` the fallback position (at least one per sequence), ``u_act`` the
    mask / random / keep action, and ``rand_ids`` the replacement of a "random" token; all [B, T]. Taking the
    draws as arguments lets a sampler draw them per example (bertcore.data.shards), so an example's masks do
    not depend on which batch, process or padding width it ends up in. ``rates.unit`` whole_word / span select
    whole words (``continuation``: the tokenizer's ``##`` pieces; None = every token a word) and draw the action
    once per unit (``bertcore.data.masking_units``); ``stats`` collects a span rule's drawn and realised lengths.
    """
    p = float(rates.mlm_probability)
    if rates.unit == "token":
        counts = maskable.sum(1)
        q = torch.tensor([_select_prob(n, p) for n in counts.tolist()])
        selected = (u_sel < q[:, None]) & maskable
        empty = (selected.sum(1) == 0) & (counts > 0)
        if bool(empty.any()):  # at least one per sequence: pick one maskable position uniformly
            pick = torch.where(maskable, u_pick, torch.full_like(u_pick, -1.0)).argmax(1)
            rows = empty.nonzero().flatten()
            selected[rows, pick[rows]] = True
        act = u_act
    else:
        starts = U.word_starts(ids, maskable, continuation)
        owner = U.word_index(starts, maskable)
        if rates.unit == "whole_word":  # the token rule over words, then every piece of a selected word
            counts = starts.sum(1)
            q = torch.tensor([_select_prob(n, p) for n in counts.tolist()])
            chosen = (u_sel < q[:, None]) & starts
            empty = (chosen.sum(1) == 0) & (counts > 0)
            if bool(empty.any()):
                pick = torch.where(starts, u_pick, torch.full_like(u_pick, -1.0)).argmax(1)
                rows = empty.nonzero().flatten()
                chosen[rows, pick[rows]] = True
            selected = U.spread(chosen, owner).bool() & maskable
            unit = owner
        else:
            selected, unit, drawn, realised = U.select_spans(starts, owner, maskable, p, float(rates.span_p),
                                                             int(rates.span_max_length), u_sel, u_pick)
            if stats is not None:
                stats.setdefault("drawn", []).extend(drawn)
                stats.setdefault("realised", []).extend(realised)
        act = u_act.gather(1, unit.clamp(min=0))  # one action draw per unit, at its first token
    m, r = float(rates.mask_token_frac), float(rates.random_token_frac)
    is_mask = selected & (act < m)
    is_rand = selected & (act >= m) & (act < m + r)
    masked = torch.where(is_mask, torch.full_like(ids, mask_id), ids)
    masked = torch.where(is_rand, rand_ids, masked)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE))
    actions = torch.zeros_like(ids)
    actions[selected] = _KEEP
    actions[is_mask] = _MASK
    actions[is_rand] = _RANDOM
    return masked, labels, actions


def mask_tokens(input_ids, tokenizer, rates: MaskingRates | None = None, generator: torch.Generator | None = None,
                with_decisions: bool = True):
    """MLM masking of one sequence (BERT §3.1) -> (masked ids, labels, decisions or None).

    Specials ([CLS], [SEP], [PAD], [UNK], [MASK]) are never selected."""
    rates = rates or MaskingRates()
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    ids = torch.as_tensor(list(input_ids), dtype=torch.long).reshape(1, -1)
    special, pool = token_tables(tokenizer)
    if ids.numel() and (int(ids.max()) >= special.numel() or int(ids.min()) < 0):
        raise InputError(Message("token id outside the vocabulary (size {size}); encode with the same tokenizer",
                                 size=special.numel()))
    masked, labels, actions = _mask_batch(ids, ~special[ids], rates, generator, pool, tokenizer.mask_id,
                                          U.continuation_table(tokenizer))
    masked_l, labels_l = masked[0].tolist(), labels[0].tolist()
    decisions = None
    if with_decisions:
        orig_l, act_l = ids[0].tolist(), actions[0].tolist()
        orig_t, placed_t = tokenizer.convert_ids_to_tokens(orig_l), tokenizer.convert_ids_to_tokens(masked_l)
        decisions = [MaskDecision(i, orig_t[i], orig_l[i], act_l[i] != _NONE, ACTIONS[act_l[i]], placed_t[i],
                                  masked_l[i]) for i in range(len(orig_l))]
    return masked_l, labels_l, decisions


# ------------------------------------------------------------------ data
_ENCODED: dict = {}  # (id(corpus), tokenizer's kind and vocabulary) -> (corpus, A ids, B ids)


def encoded_pairs(corpus, tokenizer) -> tuple[list, list]:
    """Every pair's A and B token ids, tokenized once per corpus object and vocabulary (a corpus is read-only once
    built): the runs of one process (a study's lane, its scoring) share them. Treat the lists as read-only."""
    key = (id(corpus), getattr(tokenizer, "kind", "word"), getattr(tokenizer, "lowercase", None),
           tuple(tokenizer.vocab))
    hit = _ENCODED.get(key)
    if hit is not None and hit[0] is corpus:
        return hit[1], hit[2]
    a_ids = [tokenizer.encode(a) for a, _ in corpus.pairs]
    b_ids = [tokenizer.encode(b) for _, b in corpus.pairs]
    if len(_ENCODED) >= 4:
        _ENCODED.pop(next(iter(_ENCODED)))
    _ENCODED[key] = (corpus, a_ids, b_ids)
    return a_ids, b_ids


class PretrainingData:
    """A corpus tokenized once, split into train / held-out pairs, sampled into MLM+NSP batches."""

    def __init__(self, corpus, tokenizer, max_seq_len: int = 48, rates: MaskingRates | None = None,
                 nsp_positive_prob: float = 0.5, held_out_frac: float = 0.1, seed: int = 0,
                 fixed_length: int | None = None, sentence_task: str = "nsp", causal: bool = False):
        if sentence_task not in SENTENCE_TASKS:
            raise ConfigError(Message("sentence_task={value} is not valid; choose one of {choices}",
                                      value=repr(sentence_task), choices=", ".join(SENTENCE_TASKS)))
        if len(corpus.pairs) < 2:
            raise CorpusError(Message("corpus {name} has {n} pair(s); NSP needs at least 2 so a NotNext example can "
                                      "take its B from a different pair", name=repr(corpus.name), n=len(corpus.pairs)))
        if not 0.0 <= nsp_positive_prob <= 1.0:
            raise ConfigError(Message("nsp_positive_prob={value} must be in [0, 1]", value=repr(nsp_positive_prob)))
        if not 0.0 <= held_out_frac < 1.0:
            raise ConfigError(Message("held_out_frac={value} must be in [0, 1)", value=repr(held_out_frac)))
        if max_seq_len < 5:
            raise ConfigError(Message("max_seq_len={n} is too short for [CLS] A [SEP] B [SEP]; use at least 5",
                                      n=max_seq_len))
        if fixed_length is not None and not (isinstance(fixed_length, int) and fixed_length >= max_seq_len):
            raise ConfigError(Message("fixed_length={value} must be a whole number >= max_seq_len={max_seq_len} "
                                      "(every batch is padded to it); raise it or leave it unset for dynamic padding",
                                      value=repr(fixed_length), max_seq_len=max_seq_len))
        self.fixed_length = fixed_length
        # the objective switches (TrainConfig.sentence_task, BertConfig.attention_direction): module docstring
        self.sentence_task, self.causal = sentence_task, bool(causal)
        self.corpus, self.tokenizer, self.max_seq_len = corpus, tokenizer, int(max_seq_len)
        self.rates = rates or MaskingRates()
        self.nsp_positive_prob = float(nsp_positive_prob)
        self.a_ids, self.b_ids = encoded_pairs(corpus, tokenizer)
        groups: dict[str, int] = {}
        self.b_group = torch.tensor([groups.setdefault(b, len(groups)) for _, b in corpus.pairs])
        docs = getattr(corpus, "documents", None)
        # each pair is its own document unless the corpus says otherwise (and has at least two documents)
        self.doc = torch.arange(len(corpus.pairs))
        if docs is not None and len(docs) == len(corpus.pairs) and len(set(docs)) >= 2:
            self.doc = torch.as_tensor(list(docs), dtype=torch.long)
        if len(groups) < 2:
            raise CorpusError(Message("every pair has the same second sentence, so no NotNext example can be made; "
                                      "add pairs with different B sentences"))
        n = len(corpus.pairs)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
        self.eval_on_train = not (held_out_frac > 0 and n >= 3)
        if self.eval_on_train:
            self.splits = {"train": perm.sort().values, "held_out": perm.sort().values}
        else:
            n_held = min(max(1, round(n * held_out_frac)), n - 2)
            self.splits = {"train": perm[n_held:].sort().values, "held_out": perm[:n_held].sort().values}
        # negatives come from the same split when it has two different B sentences, else from the whole corpus
        everything = torch.arange(n)
        self._neg_pool = {s: (p if self.b_group[p].unique().numel() >= 2 else everything) for s, p in self.splits.items()}
        self._neg_fallback: dict[tuple[str, int, int], torch.Tensor] = {}
        self._special, self._pool = token_tables(tokenizer)
        self._continuation = U.continuation_table(tokenizer)
        self._cls, self._sep, self._pad, self._mask = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id

    def __len__(self) -> int:
        return len(self.a_ids)

    def _split(self, split: str) -> torch.Tensor:
        if split not in self.splits:
            raise InputError(Message("split={split} is unknown; use 'train' or 'held_out'", split=repr(split)))
        return self.splits[split]

    def _negatives(self, idx: list[int], split: str, generator: torch.Generator) -> list[int]:
        """For each pair index, another pair whose B sentence differs from its own."""
        pool = self._neg_pool[split]
        cand = pool[torch.randint(pool.numel(), (len(idx), _NEG_TRIES), generator=generator)]
        own = torch.tensor(idx)
        ok = (self.b_group[cand] != self.b_group[own][:, None]) & (self.doc[cand] != self.doc[own][:, None])
        first = ok.float().argmax(1)
        out = cand[torch.arange(len(idx)), first].tolist()
        for k in (~ok.any(1)).nonzero().flatten().tolist():  # rare: all tries hit the same B
            g, d = int(self.b_group[idx[k]]), int(self.doc[idx[k]])
            fb = self._neg_fallback.get((split, g, d))
            if fb is None:
                fb = pool[(self.b_group[pool] != g) & (self.doc[pool] != d)]
                if fb.numel() == 0:
                    fb = pool[self.b_group[pool] != g]
                if fb.numel() == 0:
                    fb = torch.arange(len(self))[self.b_group != g]
                if fb.numel() == 0:
                    raise CorpusError(Message("no pair has a different B sentence; NSP needs at least two distinct B"))
                self._neg_fallback[(split, g, d)] = fb
            out[k] = int(fb[torch.randint(fb.numel(), (1,), generator=generator)])
        return out

    def _pair(self, i: int, positive: bool, j: int) -> tuple[list[int], list[int], int]:
        """(A, B, label) of one example by the sentence task: nsp: B is i's own (label 0, IsNext) or j's
        (1, NotNext); sop: i's pair in order (0) or swapped (1); none: i's pair in order (its label unused)."""
        if self.sentence_task == "nsp":
            return self.a_ids[i], self.b_ids[i if positive else j], 0 if positive else 1
        if self.sentence_task == "sop" and not positive:
            return self.b_ids[i], self.a_ids[i], 1
        return self.a_ids[i], self.b_ids[i], 0

    def _batch(self, idx: list[int], split: str, generator: torch.Generator, actions: bool = False,
               stats: dict | None = None) -> dict:
        coins = (torch.rand(len(idx), generator=generator) < self.nsp_positive_prob).tolist()
        negs = self._negatives(idx, split, generator)  # drawn for every sentence task: the same stream for all
        rows, types, labels_s, width = [], [], [], 0
        for i, pos, j in zip(idx, coins, negs):
            a, b, label = self._pair(i, pos, j)
            r, t = build_ids(self._cls, self._sep, a, b, self.max_seq_len)
            rows.append(r)
            types.append(t)
            labels_s.append(label)
            # the width NSP's pair would have: the masking draws always take it, so every task advances the
            # generator alike (the same pairs in the same order for the same seed)
            width = max(width, min(len(self.a_ids[i]) + len(self.b_ids[i if pos else j]) + 3, self.max_seq_len))
        out = pad_batch(rows, types, self._pad, self.fixed_length)
        ids = out["input_ids"]
        draws = self._draws(generator, len(idx), self.fixed_length or width, ids.shape[1])
        maskable = ~self._special[ids]
        if self.causal:  # BERT Table 5's LTR: the next token at every position, nothing masked
            masked, labels, acts = ids, U.next_token_labels(ids, maskable), torch.zeros_like(ids)
        else:
            masked, labels, acts = apply_masking(ids, maskable, self.rates, *draws, self._mask, self._continuation,
                                                 stats)
        out["input_ids"], out["mlm_labels"] = masked, labels
        out["nsp_labels"] = torch.tensor(labels_s, dtype=torch.long)
        if actions:
            out["actions"], out["original_ids"] = acts, ids
            out["pair_index"] = torch.tensor(idx)
            out["b_index"] = torch.tensor([i if c or self.sentence_task != "nsp" else j
                                           for i, c, j in zip(idx, coins, negs)])
        return out

    def _draws(self, generator: torch.Generator, b: int, width: int, t: int) -> tuple[torch.Tensor, ...]:
        """The masking draws [b, t], taken from the stream at ``width`` columns; a batch wider than that (sentence
        task none, whose true B may be longer than NSP's) takes its extra columns from a generator seeded by the
        draws, so the stream itself moves as NSP's would."""
        d = mask_draws(generator, b, width, self._pool)
        if t <= width:
            return tuple(x[:, :t] for x in d)
        extra = torch.Generator().manual_seed(int(d[0][0, 0] * 2**52))
        more = mask_draws(extra, b, t - width, self._pool)
        return tuple(torch.cat([x, y], dim=1) for x, y in zip(d, more))

    def sample_batch(self, batch_size: int, generator: torch.Generator, split: str = "train") -> dict:
        """A random batch: dict of long tensors input_ids, token_type_ids, attention_mask, mlm_labels [B, T]
        and nsp_labels [B], padded to the longest sequence in the batch."""
        pool = self._split(split)
        idx = pool[torch.randint(pool.numel(), (int(batch_size),), generator=generator)].tolist()
        return self._batch(idx, split, generator)

    def sample_batch_with_actions(self, batch_size: int, generator: torch.Generator, split: str = "train",
                                  stats: dict | None = None) -> dict:
        """Like sample_batch, plus ``original_ids``, ``actions`` (0 none, 1 mask, 2 random, 3 keep) and the
        ``pair_index`` / ``b_index`` each example took its A / B from (for inspection and tests); ``stats``
        collects a span rule's drawn and realised span lengths (in words)."""
        pool = self._split(split)
        idx = pool[torch.randint(pool.numel(), (int(batch_size),), generator=generator)].tolist()
        return self._batch(idx, split, generator, actions=True, stats=stats)

    def fixed_eval_batches(self, n_examples: int, seed: int, batch_size: int = 64) -> list[dict]:
        """Held-out batches with fixed masks and NSP choices (the same for the same seed)."""
        pool = self._split("held_out").tolist()
        g = torch.Generator().manual_seed(int(seed))
        idx = [pool[k % len(pool)] for k in range(int(n_examples))]
        return [self._batch(idx[s:s + batch_size], "held_out", g) for s in range(0, len(idx), batch_size)]

    def make_example(self, pair_index: int, generator: torch.Generator, with_decisions: bool = True) -> Example:
        """One example with its masking decisions, for display."""
        if not 0 <= pair_index < len(self):
            raise InputError(Message("pair_index={index} is out of range; use 0..{last}", index=pair_index,
                                     last=len(self) - 1))
        split = "held_out" if pair_index in set(self.splits["held_out"].tolist()) and not self.eval_on_train else "train"
        pos = bool(torch.rand(1, generator=generator) < self.nsp_positive_prob)
        j = pair_index if pos or self.sentence_task != "nsp" else self._negatives([pair_index], split, generator)[0]
        a, b, label = self._pair(pair_index, pos, j)
        ids, types = build_ids(self._cls, self._sep, a, b, self.max_seq_len)
        if self.causal:  # nothing is masked: every next real token is a target
            t = torch.tensor([ids])
            labels = U.next_token_labels(t, ~self._special[t])[0].tolist()
            dec = None
            if with_decisions:
                toks = self.tokenizer.convert_ids_to_tokens(ids)
                dec = [MaskDecision(k, toks[k], ids[k], False, "none", toks[k], ids[k]) for k in range(len(ids))]
            return Example(list(ids), types, labels, label, dec, self.tokenizer.convert_ids_to_tokens(ids))
        masked, labels, dec = mask_tokens(ids, self.tokenizer, self.rates, generator, with_decisions)
        return Example(masked, types, labels, label, dec, self.tokenizer.convert_ids_to_tokens(masked))

    def token_counts(self, split: str = "train") -> torch.Tensor:
        """Occurrences of each token id in the split's A and B sentences (specials zeroed)."""
        flat = [t for i in self._split(split).tolist() for seq in (self.a_ids[i], self.b_ids[i]) for t in seq]
        counts = torch.bincount(torch.tensor(flat, dtype=torch.long), minlength=self.tokenizer.vocab_size)
        counts[self._special] = 0
        return counts

    def unigram_baseline(self) -> float:
        """Accuracy of always predicting the most frequent non-special train token at masked positions."""
        counts = self.token_counts("train")
        total = int(counts.sum())
        return float(counts.max()) / total if total else 0.0


def pad_batch(rows: list[list[int]], types: list[list[int]], pad_id: int, width: int | None = None) -> dict:
    """Pad to the longest row (dynamic padding) or to ``width`` (fixed padding, BERT-pytorch's seq_len)."""
    width = max(len(r) for r in rows) if width is None else width
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    tt = torch.tensor([t + [0] * (width - len(t)) for t in types], dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    att = (torch.arange(width)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": att}


def collate(examples: list[Example], pad_id: int = 0) -> dict:
    """Stack Examples into padded tensors (dynamic padding to the longest example)."""
    if not examples:
        raise InputError(Message("cannot collate an empty list of examples"))
    out = pad_batch([e.input_ids for e in examples], [e.token_type_ids for e in examples], pad_id)
    width = out["input_ids"].shape[1]
    out["mlm_labels"] = torch.tensor([e.mlm_labels + [IGNORE] * (width - len(e.mlm_labels)) for e in examples])
    out["nsp_labels"] = torch.tensor([e.nsp_label for e in examples], dtype=torch.long)
    return out


def masking_stats(data: PretrainingData, draws: int = 2000, seed: int = 0) -> dict:
    """Empirical masking rates over ``draws`` sampled train sequences: selected_rate over non-special tokens,
    and the mask/random/keep shares of the selected tokens; for span masking also the mean drawn and realised
    span lengths (words) and the share of each drawn length (``span_lengths``, index 0 = length 1)."""
    if draws < 1:
        raise InputError(Message("draws={draws} must be at least 1", draws=draws))
    g = torch.Generator().manual_seed(int(seed))
    seen = sel = n_mask = n_rand = 0
    spans: dict = {}
    left = int(draws)
    while left > 0:
        b = data.sample_batch_with_actions(min(512, left), g, stats=spans)
        maskable = ~data._special[b["original_ids"]]
        acts = b["actions"]
        seen += int(maskable.sum())
        sel += int((acts != _NONE).sum())
        n_mask += int((acts == _MASK).sum())
        n_rand += int((acts == _RANDOM).sum())
        left -= b["input_ids"].shape[0]
    share = (lambda k: k / sel) if sel else (lambda k: math.nan)
    out = {"draws": int(draws), "tokens_seen": seen, "selected_rate": sel / seen if seen else math.nan,
           "mask_share": share(n_mask), "random_share": share(n_rand), "keep_share": share(sel - n_mask - n_rand)}
    if spans.get("drawn"):
        drawn, real = spans["drawn"], spans["realised"]
        longest = int(data.rates.span_max_length)
        out.update(span_mean_drawn=sum(drawn) / len(drawn), span_mean_realised=sum(real) / max(1, len(real)),
                   span_lengths=[sum(1 for x in drawn if x == k) / len(drawn) for k in range(1, longest + 1)])
    return out


def example_from_text(data_or_tokenizer, a: str, b: str | None = None, rates: MaskingRates | None = None,
                      generator: torch.Generator | None = None, max_len: int | None = None) -> Example:
    """Build a masked Example (with decisions) from typed text, for the Masking page."""
    tok = getattr(data_or_tokenizer, "tokenizer", data_or_tokenizer)
    if rates is None:
        rates = getattr(data_or_tokenizer, "rates", None) or MaskingRates()
    if max_len is None:
        max_len = getattr(data_or_tokenizer, "max_seq_len", 512)
    a = clean_text(a, "sentence A")[0]
    b_ids = None if is_blank(b) else tok.encode(clean_text(b, "sentence B")[0])
    ids, types = build_pair(tok, tok.encode(a), b_ids, max_len)
    masked, labels, dec = mask_tokens(ids, tok, rates, generator, True)
    return Example(masked, types, labels, 0, dec, tok.convert_ids_to_tokens(masked))
