"""Masking & NSP page, the objective switches: what one selection covers (token, whole word: BERT's 2019 whole-word
masking, span: SpanBERT §3.1), the sentence task (NSP: BERT §3.2, SOP: ALBERT §4.6, none: RoBERTa §4.2) and a
left-to-right model's next-token targets (BERT Table 5's LTR).

Every example is the library's own: ``bertcore.data.pretraining.PretrainingData(..., sentence_task=, causal=)``
and its ``make_example``, ``mask_tokens`` with ``MaskingRates(unit=...)``; the units of one draw are read back with
``bertcore.data.masking_units`` from the same draws ``mask_tokens`` takes (``selection_units``; a test holds them
equal), and the span lengths are ``masking_stats``' against ``geometric_pmf``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from bertcore.config import TrainConfig
from bertcore.data import masking_units as U
from bertcore.data.corpus import Corpus
from bertcore.data.pretraining import MaskingRates, PretrainingData, build_pair, mask_draws, token_tables
from explorer.figures import objectives as FO
from explorer.i18n import frozen, mark, tr

DEFAULTS = TrainConfig()
UNITS = {"token": mark("token (BERT)"), "whole_word": mark("whole word (BERT 2019)"), "span": mark("span (SpanBERT)")}
TASKS = {"nsp": mark("NSP: next or random B (BERT)"), "sop": mark("SOP: in order or swapped (ALBERT)"),
         "none": mark("none: MLM alone (RoBERTa)")}
DIRECTIONS = {"bidirectional": mark("bidirectional: masked LM"), "left_to_right": mark("left-to-right: next token")}
UNIT_PREFIX = {"token": "t", "whole_word": "w", "span": "s"}


@dataclass(frozen=True)
class Objective:
    unit: str
    span_p: float
    span_max_length: int
    task: str
    causal: bool

    def rates(self, rate: float, mask: float, rnd: float) -> MaskingRates:
        return MaskingRates(rate, mask, rnd, self.unit, self.span_p, self.span_max_length)


def default_direction(active_causal: bool) -> None:
    """The direction switch starts at the active model's direction (once per session)."""
    st.session_state.setdefault("mn_direction", "left_to_right" if active_causal else "bidirectional")


def controls() -> Objective:
    """The three switches (their defaults: TrainConfig's; the direction: ``default_direction``)."""
    c1, c2, c3 = st.columns(3)
    unit = c1.radio(tr("Masking unit (masking_unit)"), list(UNITS), key="mn_unit",
                    format_func=frozen(lambda k: tr(UNITS[k])), index=list(UNITS).index(DEFAULTS.masking_unit))
    task = c2.radio(tr("Sentence task (sentence_task)"), list(TASKS), key="mn_task",
                    format_func=frozen(lambda k: tr(TASKS[k])), index=list(TASKS).index(DEFAULTS.sentence_task))
    direction = c3.radio(tr("Attention (attention_direction)"), list(DIRECTIONS), key="mn_direction",
                         format_func=frozen(lambda k: tr(DIRECTIONS[k])),
                         help=tr("Starts at the active model's direction; a left-to-right model learns the next "
                                 "token instead of masked ones."))
    span_p, longest = DEFAULTS.span_p, DEFAULTS.span_max_length
    if unit == "span":
        s1, s2 = st.columns(2)
        span_p = s1.slider(tr("span length p (span_p)"), 0.05, 1.0, DEFAULTS.span_p, 0.05, key="mn_span_p")
        longest = s2.slider(tr("longest span in words (span_max_length)"), 1, 20, DEFAULTS.span_max_length,
                            key="mn_span_max")
    return Objective(unit, float(span_p), int(longest), task, direction == "left_to_right")


def selection_units(ids: list[int], tokenizer, rates: MaskingRates, seed: int) -> list[int]:
    """Per position, the unit whose single action draw a selected token shares (the position of the unit's first
    token), -1 where nothing is selected, for the draw ``mask_tokens(ids, tokenizer, rates,
    torch.Generator().manual_seed(seed))`` makes: the same four draws, the same rule (bertcore.data.masking_units)."""
    t = torch.tensor([ids], dtype=torch.long)
    special, pool = token_tables(tokenizer)
    u_sel, u_pick, _u_act, _rand = mask_draws(torch.Generator().manual_seed(int(seed)), 1, len(ids), pool)
    maskable = ~special[t]
    starts = U.word_starts(t, maskable, U.continuation_table(tokenizer))
    owner = U.word_index(starts, maskable)
    if rates.unit == "span":
        _, unit, _, _ = U.select_spans(starts, owner, maskable, float(rates.mlm_probability), float(rates.span_p),
                                       int(rates.span_max_length), u_sel, u_pick)
        return unit[0].tolist()
    return owner[0].tolist()  # whole words: the word each token belongs to (the caller keeps the selected ones)


def unit_labels(decisions, units: list[int], unit: str) -> list[str]:
    """"t1", "w2", "s3" ... for the selected tokens (numbered by unit, in reading order), "" elsewhere."""
    names: dict[int, str] = {}
    out = []
    for d, u in zip(decisions, units):
        key = int(d.position) if unit == "token" else int(u)
        if not d.selected or key < 0:
            out.append("")
            continue
        names.setdefault(key, f"{UNIT_PREFIX[unit]}{len(names) + 1}")
        out.append(names[key])
    return out


def whole_words_intact(decisions, units: list[int]) -> tuple[int, int, bool]:
    """(selected words, selected tokens, every piece of each selected word is selected and nothing else) for a
    whole-word draw: a word's pieces share one ``units`` value."""
    by_word: dict[int, list[bool]] = {}
    for d, u in zip(decisions, units):
        if u >= 0:
            by_word.setdefault(int(u), []).append(bool(d.selected))
    chosen = [w for w, sel in by_word.items() if any(sel)]
    intact = all(all(by_word[w]) for w in chosen) and all(not d.selected or u >= 0 for d, u in zip(decisions, units))
    return len(chosen), sum(d.selected for d in decisions), intact


def unit_caption(obj: Objective, tokenizer, decisions, units: list[int]) -> None:
    """What one draw of this unit selected, in words."""
    if obj.unit == "token":
        st.caption(tr("Unit **token** (BERT §3.1): every token is selected on its own and gets its own action."))
        return
    pieces = bool(U.continuation_table(tokenizer).any())
    if obj.unit == "whole_word":
        n_words, n_tokens, intact = whole_words_intact(decisions, units)
        if not pieces:
            st.caption(tr("Unit **whole word**: this {kind} vocabulary has no ## pieces, so every word is one token "
                          "and whole-word masking selects exactly as token masking does.", kind=tokenizer.kind))
            return
        check = tr("every piece of each selected word is selected, and nothing else") if intact else \
            tr("a word was split: please report it")
        st.caption(tr("Unit **whole word** (BERT's 2019 whole-word masking): {words} words, {tokens} tokens selected; "
                      "{check}. A word's ## pieces share one action (the same w-number in the unit row).",
                      words=n_words, tokens=n_tokens, check=check))
        return
    spans = {u for d, u in zip(decisions, units) if d.selected and u >= 0}
    st.caption(tr("Unit **span** (SpanBERT §3.1): {n} spans of whole words; each span is a run of words with one "
                  "s-number in the unit row and one action. Lengths are drawn from a geometric distribution with "
                  "p = {p}, at most {longest} words, until the selection rate's share of the tokens is selected; a "
                  "span stops at the end of its sentence.", n=len(spans), p=f"{obj.span_p:g}",
                  longest=obj.span_max_length))


def _mini_corpus(corpus, a: str, b: str, idx: int | None) -> Corpus | None:
    """The pair and one other (a PretrainingData needs a second pair with another B), or None."""
    other = next((p for j, p in enumerate(corpus.pairs) if j != idx and p[1] != b), None)
    if other is None:
        other = (b, a) if a != b else None
    return None if other is None else Corpus("pair", [(a, b), other], "")


def _segments(ex) -> tuple[str, str]:
    """The text of the first and the second segment of an example, from its original tokens (before masking)."""
    first = [d.original for d, s in zip(ex.decisions, ex.token_type_ids) if s == 0]
    second = [d.original for d, s in zip(ex.decisions, ex.token_type_ids) if s == 1]
    return " ".join(first[1:-1]), " ".join(second[:-1])


def _example(corpus, tokenizer, max_len: int, task: str, positive: float, seed: int):
    data = PretrainingData(corpus, tokenizer, max_len, MaskingRates(), positive, 0.0, seed, sentence_task=task)
    return data.make_example(0, torch.Generator().manual_seed(int(seed)))


def sentence_task_section(corpus, tokenizer, a: str, b: str | None, idx: int | None, task: str, seed: int,
                          max_len: int) -> None:
    """SOP and none, drawn by ``PretrainingData(..., sentence_task=task).make_example``; NSP is the page's own."""
    st.subheader(tr("Sentence-order prediction") if task == "sop" else tr("No sentence task"))
    if b is None:
        st.info(tr("Type a sentence B: the sentence task works on a pair."))
        return
    small = _mini_corpus(corpus, a, b, idx)
    if small is None:
        st.info(tr("The pair's A and B are the same sentence; type two different sentences."))
        return
    rows = []
    cases = ((1.0, tr("the true pair, in order")), (0.0, tr("the same pair, swapped"))) if task == "sop" else \
        ((1.0, tr("the true pair, in order")),)
    for positive, what in cases:
        ex = _example(small, tokenizer, max_len, task, positive, seed)
        first, second = _segments(ex)
        label = (f"{ex.nsp_label} = " + (tr("in order") if ex.nsp_label == 0 else tr("swapped"))) if task == "sop" else \
            tr("none (no sentence loss)")
        rows.append({tr("segment A"): first, tr("segment B"): second, tr("this example"): what,
                     tr("label"): label})
    st.table(pd.DataFrame(rows))
    if task == "sop":
        drawn = _example(small, tokenizer, max_len, task, DEFAULTS.nsp_positive_prob, seed).nsp_label
        st.caption(tr("ALBERT §4.6: the sentence head learns the *order* of two sentences that do belong together, "
                      "not whether B is a random sentence. With probability nsp_positive_prob ({p}) a pair keeps its "
                      "order (label 0), otherwise A and B swap places (label 1); `PretrainingData(..., "
                      "sentence_task=\"sop\").make_example` with seed {seed} draws label {label} for this pair.",
                      p=f"{DEFAULTS.nsp_positive_prob:g}", seed=seed, label=drawn))
    else:
        st.caption(tr("RoBERTa §4.2: masked LM alone. Every pair is packed in its true order and no sentence loss is "
                      "trained, so the training history's NSP loss and accuracy are empty (NaN) and the model has no "
                      "sentence head to ask (`sentence_task=\"none\"`)."))
    st.caption(tr("The same seed draws the same pairs in the same order under nsp, sop and none: only the label, and "
                  "for NSP the B sentence, differ."))


def next_token_section(tokenizer, a: str, b: str | None, max_len: int) -> None:
    """A left-to-right model's example: nothing masked, every real next token a target (``next_token_labels``, the
    rule ``PretrainingData(..., causal=True)`` applies)."""
    ids, types = build_pair(tokenizer, tokenizer.encode(a), tokenizer.encode(b) if b is not None else None, max_len)
    special, _ = token_tables(tokenizer)
    t = torch.tensor([ids], dtype=torch.long)
    labels = U.next_token_labels(t, ~special[t])[0].tolist()
    tokens = tokenizer.convert_ids_to_tokens(ids)
    nxt = tokenizer.convert_ids_to_tokens([int(v) if v >= 0 else tokenizer.pad_id for v in labels])
    specials = [i for i, x in enumerate(ids) if x in tokenizer.special_ids]
    layout = tokenizer.pair_template(b="B" if b is not None else None)
    st.plotly_chart(FO.next_token_figure(tokens, ids, types, labels, nxt, specials,
                                         title=tr("{layout}: the next-token targets", layout=layout)),
                    key="mn_next_chart")
    st.caption(tr("A left-to-right model (BERT Table 5's LTR) sees each token and the tokens before it, so it is "
                  "trained to predict the next one: labels[t] = ids[t + 1] wherever that token is a real word "
                  "({n} targets here), −100 where it is {sep} or {cls}. Nothing is masked and no rate applies: the "
                  "input is the pair as it is (`PretrainingData(..., causal=True)`, "
                  "`bertcore.data.masking_units.next_token_labels`).", n=sum(v != -100 for v in labels),
                  sep=tokenizer.sep_token, cls=tokenizer.cls_token))


def span_lengths_section(stats: dict, obj: Objective) -> None:
    """The measured span lengths of the largest draw against SpanBERT's truncated geometric."""
    if "span_lengths" not in stats:
        return
    pmf = U.geometric_pmf(obj.span_p, obj.span_max_length)
    st.plotly_chart(FO.span_length_figure(stats["span_lengths"], pmf, stats["span_mean_drawn"]),
                    key="mn_span_chart")
    st.caption(tr("`masking_stats(data, draws={n})[\"span_lengths\"]` against `geometric_pmf({p}, {longest})`: the "
                  "drawn lengths follow P(l) ∝ p (1 − p)^(l − 1), cut at {longest} and renormalised (mean {mean}). "
                  "A span is cut shorter where its sentence ends or the selection budget runs out, so the realised "
                  "spans are shorter: mean {real} words.", n=stats["draws"], p=f"{obj.span_p:g}",
                  longest=obj.span_max_length, mean=f"{FO.expected_mean(pmf):.2f}",
                  real=f"{stats['span_mean_realised']:.2f}"))
