"""Scoring skills with known answers (items: ``bertcore.data.skill_items``) on a model, and when each was learned.

An MLM item is passed when the model's MLM output at the [MASK] gives P(right) > P(wrong), i.e. a larger logit
(the softmax is monotone; BERT §3.1); for a left-to-right model (BERT Table 5's LTR), when it gives the sentence
with the right word a higher probability than the one with the wrong word; an NSP item when P(IsNext | A, true B) > P(IsNext | A, wrong B) (§3.2).
``SkillSuite`` encodes its items once and scores them all in a few batched forward passes in eval mode, so a
run can score every skill at every held-out evaluation (``bertcore.training.trainer``). The same items and the
same rule give the same numbers from the CLI (``python -m bertcore skills RUN``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bertcore.analysis.inference import mask_indices
from bertcore.data.corpus import Corpus
from bertcore.data.pretraining import build_pair, pad_batch
from bertcore.data.skill_items import CHANCE, SKILLS, SkillItem, builtin_items
from bertcore.data.user_text import clean_text
from bertcore.model.modes import eval_mode

BATCH = 512  # sequences per forward pass
LEVELS = (0.75, 0.9)  # the levels a "first passed" sentence reports


def is_builtin_grammar(corpus: Corpus | None) -> bool:
    """The built-in English grammar (any seed): the corpus whose skills have known answers."""
    return corpus is not None and corpus.name.startswith("builtin(")


def skill_label(name: str) -> str:
    """"verb_agreement" -> "verb agreement" (a user's "own:file" stays as it is)."""
    return name if ":" in name else name.replace("_", " ")


@dataclass
class _Encoded:
    ids: list[list[int]]
    types: list[list[int]]
    mask_at: list[int]  # MLM: the [MASK]'s index per sequence; NSP: -1
    right: list[int]  # MLM: token ids; NSP: index of the true-B sequence
    wrong: list[int]  # MLM: token ids; NSP: index of the wrong-B sequence


class SkillSuite:
    """Items of one or more skills, encoded for one tokenizer and maximum length. Items a tokenizer cannot
    score (a word that is not one whole token, a [MASK] cut off by ``max_len``) are left out and counted in
    ``skipped``."""

    def __init__(self, items: list[SkillItem], tokenizer, max_len: int):
        self.tokenizer, self.max_len = tokenizer, int(max_len)
        self.items: list[SkillItem] = []
        self.skipped: dict[str, int] = {}
        self._mlm = _Encoded([], [], [], [], [])
        self._nsp = _Encoded([], [], [], [], [])
        self._mlm_items: list[int] = []  # index into self.items of each MLM sequence
        self._nsp_items: list[int] = []  # ... of each NSP item (two sequences each)
        self._nsp_seen: dict[tuple, int] = {}  # (ids, types) -> index in self._nsp
        for it in items:
            if self._add(it):
                self.items.append(it)
            else:
                self.skipped[it.skill] = self.skipped.get(it.skill, 0) + 1
        self.names = list(dict.fromkeys(it.skill for it in self.items))

    @classmethod
    def for_run(cls, corpus: Corpus | None, tokenizer, max_len: int, extra: list[SkillItem] | None = None,
                builtin: bool = True) -> SkillSuite | None:
        """The built-in skills (for the built-in grammar, held out from ``corpus``) plus ``extra`` (a user's
        items); None when there is nothing to score."""
        items = builtin_items(corpus) if builtin and is_builtin_grammar(corpus) else []
        items += list(extra or [])
        suite = cls(items, tokenizer, max_len) if items else None
        return suite if suite is not None and suite.items else None

    # ------------------------------------------------------------------ encoding
    def _word_id(self, word: str) -> int | None:
        ids = self.tokenizer.encode(word)
        return ids[0] if len(ids) == 1 and ids[0] != self.tokenizer.unk_id else None

    def _encode(self, a: str, b: str | None) -> tuple[list[int], list[int], bool]:
        tok = self.tokenizer
        a_ids = tok.encode(clean_text(a)[0])
        b_ids = tok.encode(clean_text(b)[0]) if b is not None else None
        full = len(a_ids) + (len(b_ids) + 3 if b_ids is not None else 2)
        ids, types = build_pair(tok, a_ids, b_ids, min(full, self.max_len))
        return ids, types, len(ids) < full

    def _add(self, it: SkillItem) -> bool:
        tok = self.tokenizer
        if it.is_nsp:
            seqs = [self._encode(it.text, b) for b in (it.right, it.wrong)]
            if any(cut for _, _, cut in seqs):
                return False
            at = []
            for ids, types, _ in seqs:  # a true pair is scored once however many items use it
                key = (tuple(ids), tuple(types))
                if key not in self._nsp_seen:
                    self._nsp_seen[key] = len(self._nsp.ids)
                    self._nsp.ids.append(ids)
                    self._nsp.types.append(types)
                at.append(self._nsp_seen[key])
            self._nsp.right.append(at[0])
            self._nsp.wrong.append(at[1])
            self._nsp_items.append(len(self.items))
            return True
        right, wrong = self._word_id(it.right), self._word_id(it.wrong)
        if right is None or wrong is None or right == wrong:
            return False
        ids, types, _ = self._encode(it.text, it.text_b)
        at = mask_indices(tok, ids)
        if len(at) != 1:
            return False
        self._mlm.ids.append(ids)
        self._mlm.types.append(types)
        self._mlm.mask_at.append(at[0])
        self._mlm.right.append(right)
        self._mlm.wrong.append(wrong)
        self._mlm_items.append(len(self.items))
        return True

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def margins(self, model) -> list[float]:
        """Per item (in ``items`` order): logit(right) − logit(wrong) at the [MASK] for an MLM item, and
        P(IsNext | true B) − P(IsNext | wrong B) for an NSP item; the item is passed when its margin is > 0.
        Sequences go in batches of similar length (less padding), and the model is asked only for the rows it
        needs (``mlm_labels``: the last layer and the MLM head run at [CLS] and the [MASK] alone; the same
        numbers as the full forward pass of fill-mask)."""
        out = [0.0] * len(self.items)
        with eval_mode(model):
            dev = next(model.parameters()).device
            enc = self._mlm
            if getattr(getattr(model, "config", None), "causal", False):  # a left-to-right LM has no [MASK] to read
                for k, d in enumerate(self._sentence_margins(model, dev)):
                    out[self._mlm_items[k]] = d
                enc = _Encoded([], [], [], [], [])
            for batch in self._batches(enc.ids):
                ids, types, att, labels = self._padded(enc, batch, dev, with_mask=True)
                res = model(ids, token_type_ids=types, attention_mask=att, mlm_labels=labels)
                logits = res.mlm_logits.float()  # (B, V): one [MASK] per sequence, in batch order
                rows = torch.arange(len(batch), device=dev)
                r = torch.tensor([enc.right[k] for k in batch], device=dev)
                w = torch.tensor([enc.wrong[k] for k in batch], device=dev)
                for k, d in zip(batch, (logits[rows, r] - logits[rows, w]).tolist()):
                    out[self._mlm_items[k]] = d
            enc = self._nsp
            if not getattr(model, "has_nsp_head", True):  # no trained sentence head (sentence_task=none): no score
                for item in self._nsp_items:
                    out[item] = float("nan")
                return out
            p_next = [0.0] * len(enc.ids)
            for batch in self._batches(enc.ids):
                ids, types, att, labels = self._padded(enc, batch, dev, with_mask=False)
                res = model(ids, token_type_ids=types, attention_mask=att, mlm_labels=labels)  # [CLS] rows only
                for k, p in zip(batch, torch.softmax(res.nsp_logits.float(), dim=-1)[:, 0].tolist()):
                    p_next[k] = p  # P(IsNext): label 0
            for k, item in enumerate(self._nsp_items):
                out[item] = p_next[enc.right[k]] - p_next[enc.wrong[k]]
        return out

    def _sentence_margins(self, model, dev) -> list[float]:
        """A left-to-right model's MLM items (BERT Table 5's LTR): log P(text with right) − log P(text with wrong),
        each the sum of the next-token log-probabilities of the real words (the minimal-pair rule of language-model
        benchmarks), so an item passes when the model prefers the right sentence."""
        enc, special = self._mlm, self.tokenizer.special_ids
        seqs, types, owner = [], [], []
        for k, (ids, tt, at) in enumerate(zip(enc.ids, enc.types, enc.mask_at)):
            for word in (enc.right[k], enc.wrong[k]):
                seqs.append([word if i == at else t for i, t in enumerate(ids)])
                types.append(tt)
                owner.append(k)
        logp = [0.0] * len(seqs)
        for batch in self._batches(seqs):
            b = pad_batch([seqs[i] for i in batch], [types[i] for i in batch], self.tokenizer.pad_id)
            ids = b["input_ids"].to(dev)
            res = model(ids, token_type_ids=b["token_type_ids"].to(dev), attention_mask=b["attention_mask"].to(dev))
            lp = torch.log_softmax(res.mlm_logits.float(), dim=-1)[:, :-1]  # (B, T-1, V): predicts token t + 1
            nxt = ids[:, 1:]
            real = b["attention_mask"].to(dev)[:, 1:].bool()
            for sp in special:
                real &= nxt != sp
            got = (lp.gather(-1, nxt[..., None])[..., 0] * real).sum(1)
            for i, v in zip(batch, got.tolist()):
                logp[i] = v
        return [logp[2 * k] - logp[2 * k + 1] for k in range(len(enc.ids))]

    @staticmethod
    def _batches(seqs: list[list[int]]) -> list[list[int]]:
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        return [order[s:s + BATCH] for s in range(0, len(order), BATCH)]

    def _padded(self, enc: _Encoded, batch: list[int], dev, with_mask: bool):
        b = pad_batch([enc.ids[k] for k in batch], [enc.types[k] for k in batch], self.tokenizer.pad_id)
        ids = b["input_ids"].to(dev)
        labels = torch.full_like(ids, -100)
        if with_mask:
            rows = torch.arange(len(batch), device=dev)
            labels[rows, torch.tensor([enc.mask_at[k] for k in batch], device=dev)] = 0
        return ids, b["token_type_ids"].to(dev), b["attention_mask"].to(dev), labels

    def score(self, model) -> dict[str, float]:
        """{skill: share of its items passed}, in ``names`` order."""
        return self.summarise(self.margins(model))

    def summarise(self, margins: list[float]) -> dict[str, float]:
        """{skill: share passed}; NaN for a skill the model cannot be asked (an NSP skill without a sentence head)."""
        passed: dict[str, list[int]] = {k: [0, 0] for k in self.names}
        for it, m in zip(self.items, margins):
            if m != m:
                continue
            passed[it.skill][0] += m > 0
            passed[it.skill][1] += 1
        return {k: ok / n if n else float("nan") for k, (ok, n) in passed.items()}

    def describe(self) -> list[dict]:
        """Per skill: name, what it tests, chance level, items scored and items left out."""
        counts: dict[str, int] = {}
        for it in self.items:
            counts[it.skill] = counts.get(it.skill, 0) + 1
        return [{"skill": k, "description": SKILLS.get(k, "your own items (text,right,wrong)"), "chance": CHANCE,
                 "items": counts[k], "skipped": self.skipped.get(k, 0)} for k in self.names]


def first_passes(rows: list[dict], names: list[str], levels=LEVELS, seconds: dict[int, float] | None = None) -> list[dict]:
    """When each skill first reached each level: ``rows`` are {"step", skill: score} in step order (skills.csv);
    ``seconds`` maps a step to the training time it was reached at (history.csv), when known. Per (skill, level)
    reached: {"skill", "level", "step", "seconds" (or None)}, in the order they happened."""
    out = []
    for name in names:
        for level in levels:
            for r in rows:
                v = r.get(name)
                if v is not None and v == v and v >= level:
                    step = int(r["step"])
                    out.append({"skill": name, "level": level, "step": step,
                                "seconds": (seconds or {}).get(step)})
                    break
    return sorted(out, key=lambda d: (d["step"], d["skill"], d["level"]))
