"""Property-based fuzz (hypothesis) of everything a person types into: the tokenizers, fill-mask, NSP and
pair inspection on a tiny model. Whatever the text (emoji, control characters, CJK, typed [CLS]/[SEP]/[MASK],
50,000 characters), the only exception that may escape is ``bertcore.errors.BertcoreError`` with a message,
and every result is well formed: probabilities in [0, 1] and sorted, shapes consistent, ``truncated`` set
exactly when the input did not fit.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertcore.analysis.inference import fill_mask, inspect_pair, nsp_probability
from bertcore.config import BertConfig
from bertcore.data.tokenization import SPECIAL_TOKENS, WordPieceTokenizer, WordTokenizer, basic_tokenize
from bertcore.errors import BertcoreError
from bertcore.model.bert import BertForPreTraining
from bertcore.data.user_text import MAX_TEXT_CHARS, clean_text

TEXTS = ["the cat eats the fish .", "then it sleeps under the table .", "two dogs run in the park .",
         "a bird sings in the tree .", "the children play with a red ball ."]
MAX_POS = 16  # tiny position table: truncation happens often

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])

FRAGMENTS = ["[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[mask]", "[MASK", "MASK]", "the", "cat", "Fish",
             "sleeps", "zebra", "😀", "👩‍👩‍👧", "中文", "日本語", "é", "naïve", "\x00", "\x07", "\x1b[31m", "\u200b",
             "\ufeff", "\ufffd", "\u2028", "\r\n", "\t", "\n", " ", "  ", "##", "##s", ".", "!?", "'", '"',
             "\u0301", "ﬁ", "Ω", "x" * 120, "-" * 30]

unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)
fragment_text = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)
mixed_text = st.lists(st.one_of(unicode_text, fragment_text), min_size=1, max_size=4).map(" ".join)
long_text = st.tuples(st.one_of(fragment_text, unicode_text), st.integers(200, 3000)).map(
    lambda t: (t[0] or "the [MASK] ")[:40] * t[1])  # up to 120,000 characters (MAX_TEXT_CHARS is 100,000)
any_text = st.one_of(unicode_text, fragment_text, mixed_text, long_text)
masked_text = st.tuples(any_text, st.integers(0, 25), any_text).map(
    lambda t: t[0] + " [MASK]" * t[1] + " " + t[2])


@pytest.fixture(scope="module")
def toks():
    wp = WordPieceTokenizer.train(TEXTS * 3, vocab_size=60, min_frequency=1)
    return {"word": WordTokenizer.build(TEXTS), "wordpiece": wp}


@pytest.fixture(scope="module")
def models(toks):
    import torch

    out = {}
    for kind, tok in toks.items():
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                         num_hidden_layers=2, max_position_embeddings=MAX_POS)
        out[kind] = (BertForPreTraining(cfg).eval(), tok)
    return out


def _call(fn, *a, **kw):
    """Run ``fn``: return its result, or None when it raised BertcoreError with a message. Anything else fails."""
    try:
        return fn(*a, **kw)
    except BertcoreError as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return None


def _n_content_tokens(tok, text: str) -> int | None:
    try:
        cleaned, _ = clean_text(text)
    except BertcoreError:
        return None
    return len(tok.encode(cleaned))


# ------------------------------------------------------------------ tokenizers
@FUZZ
@given(text=any_text, lower=st.booleans())
def test_basic_tokenize_never_fails_and_gives_clean_words(text, lower):
    words = basic_tokenize(text, lower=lower)
    assert isinstance(words, list) and all(isinstance(w, str) for w in words)
    for w in words:
        assert w and not any(c.isspace() for c in w), repr(w)
        assert w in SPECIAL_TOKENS or "\x00" not in w
    # typed special tokens survive as single tokens, in order
    assert [w for w in words if w in SPECIAL_TOKENS] == [w for w in basic_tokenize(text) if w in SPECIAL_TOKENS]
    assert words.count("[MASK]") == text[:].count("[MASK]")


@FUZZ
@given(text=any_text, kind=st.sampled_from(["word", "wordpiece"]))
def test_tokenizers_encode_tokenize_unknown_words(toks, text, kind):
    tok = toks[kind]
    ids = _call(tok.encode, text)
    tokens = _call(tok.tokenize, text)
    unknown = _call(tok.unknown_words, text)
    if ids is None:  # only a documented error, never a crash
        return
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.encode(text) == ids  # deterministic (and the cache returns a copy)
    ids.append(-1)
    assert tok.encode(text) == ids[:-1]
    assert tokens is not None and len(tokens) == len(ids[:-1])
    assert tok.convert_ids_to_tokens(ids[:-1]) == [t if t in tok.token_to_id else "[UNK]" for t in tokens]
    assert unknown is not None and all(isinstance(w, str) and w for w in unknown)
    if unknown:
        assert tok.unk_id in ids
    if kind == "word":
        assert tok.convert_ids_to_tokens(ids[:-1]) == tokens
        assert ids[:-1].count(tok.mask_id) == text.count("[MASK]")


# ------------------------------------------------------------------ inference
@FUZZ
@given(text=st.one_of(any_text, masked_text), kind=st.sampled_from(["word", "wordpiece"]),
       top_k=st.one_of(st.integers(-3, 40), st.just(10**9), st.sampled_from([0, 1.5, True, "5", None])))
def test_fill_mask_fuzz(models, text, kind, top_k):
    model, tok = models[kind]
    r = _call(fill_mask, model, tok, text, top_k=top_k)
    if r is None:
        return
    assert isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1
    assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]" and len(r.tokens) <= MAX_POS
    assert r.masks, "a result always has at least one [MASK]"
    n = _n_content_tokens(tok, text)
    assert r.truncated == (n + 2 > MAX_POS or len(text) > MAX_TEXT_CHARS)
    assert [m.position for m in r.masks] == [i for i, t in enumerate(r.tokens) if t == "[MASK]"]
    for m in r.masks:
        probs = [p for _, p in m.candidates]
        assert len(probs) == min(top_k, tok.vocab_size)
        assert all(0.0 <= p <= 1.0 and math.isfinite(p) for p in probs)
        assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-5
        assert all(t in tok.token_to_id for t, _ in m.candidates)


@FUZZ
@given(a=any_text, b=st.one_of(any_text, st.none()), kind=st.sampled_from(["word", "wordpiece"]))
def test_nsp_probability_fuzz(models, a, b, kind):
    model, tok = models[kind]
    p = _call(nsp_probability, model, tok, a, b)
    if p is None:
        return
    assert b is not None
    assert isinstance(p, float) and 0.0 <= p <= 1.0


@FUZZ
@given(a=any_text, b=st.one_of(any_text, st.none()), kind=st.sampled_from(["word", "wordpiece"]),
       max_len=st.one_of(st.none(), st.integers(4, MAX_POS)))
def test_inspect_pair_fuzz(models, a, b, kind, max_len):
    model, tok = models[kind]
    ins = _call(inspect_pair, model, tok, a, b, max_len=max_len)
    if ins is None:
        return
    cfg = model.config
    T = len(ins.tokens)
    limit = max_len or MAX_POS
    assert 3 <= T <= limit and len(ins.input_ids) == T and len(ins.segment_ids) == T
    assert ins.tokens[0] == "[CLS]" and ins.tokens[-1] == "[SEP]"
    assert ins.attentions.shape == (cfg.num_hidden_layers, cfg.num_attention_heads, T, T)
    assert ins.hidden_states.shape == (cfg.num_hidden_layers + 1, T, cfg.hidden_size)
    assert np.isfinite(ins.attentions).all() and np.isfinite(ins.hidden_states).all()
    assert np.allclose(ins.attentions.sum(-1), 1.0, atol=1e-4) and (ins.attentions >= 0).all()
    for v in ins.embeddings.values():
        assert v.shape == (T, cfg.hidden_size)
    n_special = 2 if b is None else 3
    n = _n_content_tokens(tok, a) + (0 if b is None else _n_content_tokens(tok, b))
    too_long = len(a) > MAX_TEXT_CHARS or (b is not None and len(b) > MAX_TEXT_CHARS)
    assert ins.truncated == (n + n_special > limit or too_long)
    assert ins.tokens[ins.sep_index] == "[SEP]" and ins.segment_ids[ins.sep_index] == 0
    if b is None:
        assert set(ins.segment_ids) == {0}
    else:  # [CLS] A [SEP] | B [SEP]: segment 1 starts right after A's closing [SEP]
        first_b = ins.segment_ids.index(1)
        assert ins.segment_ids == [0] * first_b + [1] * (T - first_b)
        assert ins.tokens[first_b - 1] == "[SEP]"


def test_fifty_thousand_characters_are_truncated_with_notice(models):
    model, tok = models["word"]
    text = ("the cat eats the fish . 😀 中文 " * 2000)[:50_000] + " [MASK]"
    ins = inspect_pair(model, tok, text)
    assert ins.truncated and len(ins.tokens) == MAX_POS
    r = fill_mask(model, tok, "[MASK] " + text)
    assert r.truncated and len(r.tokens) == MAX_POS and r.masks[0].position == 1


def test_sep_index_is_the_real_boundary_even_with_a_typed_sep(models):
    model, tok = models["word"]
    ins = inspect_pair(model, tok, "the cat [SEP] eats", "the fish")
    assert ins.sep_index == ins.segment_ids.index(1) - 1
