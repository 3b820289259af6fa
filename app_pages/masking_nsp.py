"""Learn · Masking & NSP: how one pre-training example is built (BERT §3.1 MLM, §3.2 NSP)."""
from __future__ import annotations

import random

import pandas as pd
import streamlit as st
import torch

from bertcore.data import pretraining as P
from bertcore.data.pretraining import (
    MaskingRates,
    expected_selection_rate,
)
from explorer.session import corpus_state as cs, page_caches
from explorer.figures import learn as F
from explorer.parts import masking_view as MV
from explorer.parts.tutorial_example import render_bert_pytorch_example

from bertcore.config import TrainConfig
from explorer.parts.examples import Examples, session_examples
from explorer.figures.learn import percent
from bertcore.data.user_text import MAX_TEXT_CHARS, clean_text, is_blank
from explorer.i18n import frozen, mark, tr
from explorer.session.memo import memo_shown
from explorer.page_errors import user_action
from explorer.session import state

# The rates below are the sliders' (their defaults: TrainConfig's); the paper's own are named as BERT's.
INTRO = mark("""
BERT learns from two self-made tasks. **Masked LM** (§3.1): a share of the tokens is *selected*, {rate} with the
sliders below (BERT: 15%); of those, {mask} are replaced by `{mask_token}`, {rnd} by a random token and {keep} are
kept (BERT: 80/10/10), and the model must predict the original token at every selected position (the label is −100,
i.e. ignored, everywhere else). **Next sentence prediction** (§3.2): a share `nsp_positive_prob` of the pairs, {nsp}
by default (BERT: half), keep their true sentence B (IsNext, label 0); the others get a random B (NotNext, label 1).
Everything here is computed by `bertcore.data.pretraining` (`build_pair`, `mask_tokens`, `masking_stats`).
""")
DEFAULTS = TrainConfig()  # the sliders start at the training defaults
TYPED_DEFAULTS = Examples("the cat [MASK] the cheese in the kitchen .", "the cat eats the cheese in the kitchen .",
                          "the cat eats the cheese in the kitchen .", "it is sticky near the stove .")

SOURCES = [mark("a pair from the corpus"), mark("type a pair")]
DRAWS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
STATS_PAIRS = 5000  # the convergence chart draws from the first pairs of the corpus


def _intro(mask_token: str) -> str:
    """INTRO with the rates the sliders hold now (their values reach session_state before the rerun that draws
    the page, so the text above the sliders already reads the values below them)."""
    ss = st.session_state
    rate = float(ss.get("mn_rate", DEFAULTS.mlm_probability))
    mask = float(ss.get("mn_mask", DEFAULTS.mask_token_frac))
    rnd = float(ss.get("mn_random", DEFAULTS.random_token_frac))
    return tr(INTRO, rate=percent(rate), mask=percent(mask), rnd=percent(rnd), keep=percent(max(0.0, 1 - mask - rnd)),
                        mask_token=mask_token, nsp=percent(DEFAULTS.nsp_positive_prob))


def _loss_latex() -> str:
    """The pre-training loss of the objective the switches below hold (their values reach session_state before the
    rerun that draws the page): MLM or next-token, plus NSP, SOP or nothing."""
    ss = st.session_state
    causal = ss.get("mn_direction") == "left_to_right"
    task = ss.get("mn_task", DEFAULTS.sentence_task)
    lm = (r"-\sum_{t} \log p_\theta(x_{t+1} \mid x_{\le t})" if causal else
          r"-\sum_{i \in \text{selected}} \log p_\theta(x_i \mid \tilde{x})")
    sentence = {"nsp": r"\;-\; \log p_\theta(\text{IsNext/NotNext} \mid \tilde{x})",
                "sop": r"\;-\; \log p_\theta(\text{in order/swapped} \mid \tilde{x})"}.get(task, "")
    return r"\mathcal{L} = " + lm + sentence


def _bump_seed() -> None:
    st.session_state["mn_seed"] = int(st.session_state.get("mn_seed", 0)) + 1


def _random_index(n: int) -> None:
    rng = random.Random(int(st.session_state.get("mn_seed", 0)) * 7919 + int(st.session_state.get("mn_index", 0)))
    st.session_state["mn_index"] = rng.randrange(n)


def _corpus_and_tokenizer():
    """The corpus and tokenizer chosen on the Data & tokens page (the built-in corpus, word-level, by default)."""
    choice = cs.active()
    return choice.corpus, cs.tokenizer(choice), f"{choice.key}|{choice.kind}|{choice.vocab_size}"


def _as_list(x) -> list[int]:
    if hasattr(x, "tolist"):
        x = x.tolist()
    if x and isinstance(x[0], list):  # a batch of one
        x = x[0]
    return [int(v) for v in x]


def _controls(mask_token: str = "[MASK]"):
    c1, c2, c3 = st.columns(3)
    rate = c1.slider(tr("selection rate (mlm_probability)"), 0.0, 1.0, DEFAULTS.mlm_probability, 0.01, key="mn_rate")
    mask = c2.slider(tr("{mask_token} share of selected", mask_token=mask_token), 0.0, 1.0, DEFAULTS.mask_token_frac, 0.05, key="mn_mask")
    rnd = c3.slider(tr("random-token share of selected"), 0.0, 1.0, DEFAULTS.random_token_frac, 0.05, key="mn_random")
    keep = 1.0 - mask - rnd
    d1, d2, d3 = st.columns([2, 1, 2])
    st.session_state.setdefault("mn_seed", 0)
    d1.number_input(tr("seed"), 0, 2**31 - 1, step=1, key="mn_seed")
    d2.button(tr("Re-draw"), on_click=_bump_seed, key="mn_redraw", help=tr("next seed: a new random draw"))
    max_len = d3.slider("max_seq_len", 8, 128, DEFAULTS.max_seq_len, key="mn_max_len")
    if keep < -1e-9:
        st.error(tr("{mask_token} share + random share = {total} > 1. They are shares of the *selected* tokens "
                    "(the rest are kept unchanged), so lower one of them.", mask_token=mask_token,
                    total=f"{mask + rnd:.2f}"))
        return None
    st.caption(tr("Kept unchanged: {keep} of the selected tokens (= 1 − mask − random).", keep=percent(max(keep, 0))))
    return rate, mask, rnd, max(keep, 0.0), max_len


def _pair_input(corpus, tokenizer):
    source = st.radio(tr("Input"), SOURCES, horizontal=True, key="mn_source", format_func=frozen())
    n = len(corpus.pairs)
    if source == SOURCES[0]:
        c1, c2 = st.columns([4, 1])
        if n > 1:
            if not 0 <= int(st.session_state.get("mn_index", 0)) < n:
                st.session_state["mn_index"] = 0  # the corpus changed under a stored index
            st.session_state.setdefault("mn_index", 0)
            idx = c1.slider(tr("pair index"), 0, n - 1, key="mn_index")
            c2.button(tr("Random pair"), on_click=_random_index, args=(n,), key="mn_random_pair")
        else:
            idx = 0
        a, b = corpus.pairs[min(idx, n - 1)]
        return a, b, idx
    ex = session_examples(tokenizer, TYPED_DEFAULTS)  # a pair the vocabulary knows, in the corpus's language
    a = st.text_input(tr("sentence A"), value=ex.a, key="mn_text_a")
    b = st.text_input(tr("sentence B"), value=ex.b, key="mn_text_b")
    return a, b, None


@user_action("Mask one example")
def _masking_section(tokenizer, a: str, b: str | None, rates, max_len: int, seed: int, obj: MV.Objective):
    rate, mask, rnd, _keep, _ = rates
    if obj.causal:  # BERT Table 5's LTR: next-token targets, nothing masked
        MV.next_token_section(tokenizer, a, b, max_len)
        return
    unit_rates = obj.rates(rate, mask, rnd)
    a_ids, b_ids = tokenizer.encode(a), (tokenizer.encode(b) if b is not None else None)
    n_in = len(a_ids) + len(b_ids or []) + (3 if b_ids is not None else 2)
    ids, types = P.build_pair(tokenizer, a_ids, b_ids, max_len)
    ids, types = _as_list(ids), _as_list(types)
    # BERT-pytorch labels segment A with 1 and B with 2 (0 = padding)
    bert_pytorch_format = tokenizer.kind == "bert_pytorch"
    shown_types = [t + 1 for t in types] if bert_pytorch_format else types
    if n_in > max_len:
        st.warning(tr("The pair has {n} tokens with {cls}/{sep}; it was truncated to max_seq_len = {max_len} "
                      "(longest sentence first), as in training.", n=n_in, cls=tokenizer.cls_token,
                      sep=tokenizer.sep_token, max_len=max_len))
    gen = torch.Generator().manual_seed(int(seed))
    masked, labels, decisions = P.mask_tokens(torch.tensor(ids), tokenizer, unit_rates, gen)
    masked, labels = _as_list(masked), _as_list(labels)
    units = MV.selection_units(ids, tokenizer, unit_rates, int(seed))
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = [i for i, t in enumerate(ids) if t in tokenizer.special_ids]
    layout = tokenizer.pair_template(b="B" if b_ids is not None else None)
    # the same pair, rates and seed draw the same masks: the figure is built once for every session
    fig = memo_shown(tokenizer, ("mn_mask_fig", a, b, rates, max_len, int(seed), obj), lambda: F.masking_figure(
        tokens, ids, shown_types, decisions, tokenizer.convert_ids_to_tokens(masked), masked, labels, special,
        rates=unit_rates, title=tr("{layout} with the masking of seed {seed}", layout=layout, seed=seed),
        first_segment=1 if bert_pytorch_format else 0, mask_token=tokenizer.mask_token,
        units=None if obj.unit == "token" else MV.unit_labels(decisions, units, obj.unit)))
    st.plotly_chart(fig, key="mn_mask_chart")
    MV.unit_caption(obj, tokenizer, decisions, units)
    sel = [d for d in decisions if d.selected]
    counts = {k: sum(d.action == k for d in sel) for k in ("mask", "random", "keep")}
    maskable = len(ids) - len(special)
    mask_tok = tokenizer.mask_token
    st.caption(tr("{sel} of {maskable} maskable tokens selected · {n_mask} → {mask_tok} · {n_random} → random · "
                  "{n_keep} kept. The loss is computed only where the label is not −100. Special tokens (incl. a "
                  "typed {mask_tok}) are never selected.", sel=len(sel), maskable=maskable, n_mask=counts["mask"],
                  mask_tok=mask_tok, n_random=counts["random"], n_keep=counts["keep"]))
    if bert_pytorch_format:
        st.caption(tr("Segment ids as BERT-pytorch labels them: 1 for `<sos> A <eos>`, 2 for `B <eos>`, 0 for "
                      "padding (a model with segment_ids=1/2 embeds these rows); the ids are the BERT-pytorch "
                      "vocabulary's."))
    if maskable == 0:
        st.info(tr("Nothing to mask: the pair holds only special tokens."))


@user_action("Draw the NSP examples")
def _nsp_section(corpus, a: str, true_b: str | None, idx: int | None, seed: int):
    st.subheader(tr("Next sentence prediction"))
    rng = random.Random(int(seed))
    others = [j for j in range(len(corpus.pairs)) if j != idx and corpus.pairs[j][1] != true_b]
    if not others:
        st.info(tr("The corpus has no other sentence B to draw a NotNext example from."))
        return
    j = others[rng.randrange(len(others))]
    rows = []
    if true_b:
        rows.append({tr("sentence A"): a, tr("sentence B"): true_b, tr("B is"): tr("the true next sentence"),
                     tr("NSP label"): "0 = IsNext"})
    rows.append({tr("sentence A"): a, tr("sentence B"): corpus.pairs[j][1], tr("B is"): tr("random (from pair {j})", j=j),
                 tr("NSP label"): "1 = NotNext"})
    st.table(pd.DataFrame(rows))
    st.caption(tr("In training each pair keeps its true B with probability nsp_positive_prob "
                  "({p} by default, `TrainConfig`) and otherwise gets the B of a random other "
                  "pair (never the true one), as in `PretrainingData.make_example`.",
                  p=f"{DEFAULTS.nsp_positive_prob:g}"))


@user_action("Count the masking rates")
def _stats_section(corpus, tokenizer, ckey: str, rates, seed: int, obj: MV.Objective):
    st.subheader(tr("Empirical rates over N draws"))
    if obj.causal:
        st.info(tr("A left-to-right model masks nothing: every real next token is a target, so there are no masking "
                   "rates to count. Choose the bidirectional objective above to count them."))
        return
    rate, mask, rnd, keep, max_len = rates
    key = f"{ckey}|{tokenizer.kind}|{tokenizer.vocab_size}"
    unit = (obj.unit, obj.span_p, obj.span_max_length)  # MaskingRates' fields after the three rates
    with st.spinner(tr("Drawing masked examples…")):
        stats = page_caches.masking_convergence(key, corpus, tokenizer, max_len, (rate, mask, rnd, *unit), int(seed),
                                                STATS_PAIRS, tuple(DRAWS))
    configured = {"selected_rate": rate, "mask_share": mask, "random_share": rnd, "keep_share": keep}
    fig = memo_shown(tokenizer, ("mn_stats_fig", key, max_len, (rate, mask, rnd, keep), int(seed), unit),
                     lambda: F.masking_convergence_figure(stats, configured, tokenizer.mask_token))
    st.plotly_chart(fig, key="mn_stats_chart")
    last = stats[-1]
    st.caption(tr("`masking_stats(data, draws=N)` for N = {draws} examples (first {pairs} pairs). At N = {n}: "
                  "{seen} tokens seen, selected {selected}, {mask_token} {mask}, random {random}, kept {keep}. "
                  "With few draws the rates wobble; with many they approach the dashed configured values "
                  "(`mask_tokens` selects at least one token per sequence and corrects the per-token rate for that; "
                  "only at very low rates, where one token per sequence is already more than asked, does it stay "
                  "above).", draws=", ".join(map(str, DRAWS)), pairs=min(STATS_PAIRS, len(corpus.pairs)),
                  n=last["draws"], seen=f"{last['tokens_seen']:,}", selected=f"{last['selected_rate']:.3f}",
                  mask_token=tokenizer.mask_token, mask=f"{last['mask_share']:.3f}",
                  random=f"{last['random_share']:.3f}", keep=f"{last['keep_share']:.3f}"))
    MV.span_lengths_section(last, obj)


@user_action("Compute the selection rule")
def _selection_rule(corpus, tokenizer, ckey: str, rates, obj: MV.Objective) -> None:
    """The masking rule in words, and the selection rate it gives on this corpus (BERT §3.1)."""
    rate, mask, rnd, _keep, max_len = rates
    if obj.causal:
        return
    if obj.unit != "token":  # the rule below is the token rule; whole words and spans: masking_units
        st.caption(tr("**Selection rule** for {unit} (`bertcore.data.masking_units`): whole words are chosen (a word "
                      "with all its ## pieces), {how}, so that about {rate} of the tokens are selected; the [MASK] / "
                      "random / keep action is drawn once per unit.", unit=tr(MV.UNITS[obj.unit]),
                      how=tr("each by the token rule's corrected Bernoulli draw") if obj.unit == "whole_word" else
                      tr("in spans of geometric length from random starting words until max(1, round(n × rate)) "
                         "tokens are selected"), rate=percent(rate)))
        return
    lengths = page_caches.maskable_lengths(f"{ckey}|{tokenizer.kind}|{tokenizer.vocab_size}", corpus, tokenizer,
                                           max_len, STATS_PAIRS)
    expected = expected_selection_rate(lengths, rate)
    c1, c2 = st.columns([3, 1])
    c1.caption(tr("**Selection rule** (`bertcore.data.pretraining.masking_rule`): {rule}",
                  rule=rule_text(MaskingRates(rate, mask, rnd), tokenizer.mask_token)))
    c2.metric(tr("selected on this corpus"), f"{expected:.1%}",
              delta=tr("{delta} vs slider", delta=f"{expected - rate:+.1%}"), delta_color="off",
              help=tr("Expected share of maskable tokens selected over the first {n} pairs at this max_seq_len "
                      "(the empirical rate over many draws is in the chart at the bottom).", n=f"{len(lengths):,}"))


def rule_text(r: MaskingRates, mask_token: str) -> str:
    """``masking_rule``'s words in the session's language (in English exactly ``masking_rule``'s text; a test
    holds them equal)."""
    p = r.mlm_probability
    return tr("Each non-special token is selected by a Bernoulli draw; a sequence with n such tokens gets at least "
              "one. So that the expected count stays n x {p}, the per-token rate q solves n q + (1 - q)^n = n x {p} "
              "when n x {p} >= 1; when n x {p} < 1 exactly one token is selected, so short sequences are selected "
              "at 1/n > {p4} (BERT's create_pretraining_data.py also selects max(1, round(n x {p})) tokens). "
              "Of the selected: {mask} -> {mask_token}, {random} -> a random token, {keep} kept (BERT §3.1 draws "
              "0.8 / 0.1 / 0.1).", p=f"{p:g}", p4=f"{p:.4g}", mask=f"{r.mask_token_frac:.4g}",
              random=f"{r.random_token_frac:.4g}", keep=f"{r.keep_frac:.4g}", mask_token=mask_token)


def _typed(a: str, b: str):
    """(A, B or None, cut) by the library's rules (``bertcore.data.user_text``): invisible characters become spaces,
    a blank B is no B, very long text is cut. Raises InputError for a blank A."""
    a, cut_a = clean_text(a, "sentence A")
    if is_blank(b):
        return a, None, cut_a
    b, cut_b = clean_text(b, "sentence B")
    return a, b, cut_a or cut_b


def render() -> None:
    st.title(tr("Masking & NSP"))
    active_causal = bool(state.get_active().model.config.causal)
    MV.default_direction(active_causal)  # before the loss formula, which reads it
    st.latex(_loss_latex())
    with user_action("Read the corpus and tokenizer") as act:
        corpus, tokenizer, ckey = _corpus_and_tokenizer()
    if act.failed:
        return
    st.markdown(_intro(tokenizer.mask_token))
    st.caption(tr("Corpus **{name}** ({pairs} pairs) with a {kind} tokenizer of {size} tokens; change both on "
                  "the *Data & tokens* page.", name=corpus.name, pairs=f"{len(corpus.pairs):,}", kind=tokenizer.kind,
                  size=f"{tokenizer.vocab_size:,}"))
    rates = _controls(tokenizer.mask_token)
    obj = MV.controls()
    if rates is not None:
        _selection_rule(corpus, tokenizer, ckey, rates, obj)
    a, b, idx = _pair_input(corpus, tokenizer)
    seed = int(st.session_state.get("mn_seed", 0))
    if is_blank(a):  # the library's rule: spaces and invisible characters only
        st.info(tr("Type a sentence A (and a sentence B) to build a pair."))
        return
    with user_action("Read the pair") as act:
        a, b, cut = _typed(a, b)
    if act.failed:
        return
    if cut:
        st.warning(tr("Very long input: only the first {n} characters of each sentence are read "
                      "(the pair is truncated to max_seq_len anyway).", n=f"{MAX_TEXT_CHARS:,}"))
    if rates is None:
        return
    st.subheader(tr("Next-token LM: one example") if obj.causal else tr("Masked LM: one example"))
    _masking_section(tokenizer, a, b, rates, rates[4], seed, obj)
    if b is None:
        st.info(tr("Sentence B is empty, so the example is {template}; type a B for the NSP part.",
                   template=tokenizer.pair_template(b=None)))
    if obj.task == "nsp":
        _nsp_section(corpus, a, b, idx, seed)
    else:
        with user_action("Draw the sentence-task examples"):
            MV.sentence_task_section(corpus, tokenizer, a, b, idx, obj.task, seed, rates[4])
    if ckey.startswith("tutorial|"):
        render_bert_pytorch_example("mn_bert_pytorch")
    _stats_section(corpus, tokenizer, ckey, rates, seed, obj)


render()
