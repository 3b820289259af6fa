"""The one rule for typed text (issue 27, ``bertcore.data.user_text``): what is empty, how text is normalised and
cut, and that every part of the library that refuses empty text (inference, the live probe, masking examples, corpus
pairs, task CSVs) agrees with it, so the app and the CLI give the same answer for the same text."""
from __future__ import annotations

import unicodedata

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertcore.analysis.inference import encode_pair, fill_mask, mask_positions
from bertcore.analysis.live_probe import Probe, check_probe, run_probe
from bertcore.config import BertConfig
from bertcore.data.corpus import load_corpus_file
from bertcore.data.pretraining import example_from_text
from bertcore.data.tasks import load_task_csv
from bertcore.data.tokenization import WordTokenizer
from bertcore.data.user_text import MAX_TEXT_CHARS, clean_text, is_blank, normalize
from bertcore.errors import BertcoreError, CorpusError, InputError
from bertcore.model.bert import init_model

INVISIBLE = ["\u202e\u200b\u200d", "\ufeff", "\u200b" * 50, "\x00\x07\x1b", "\u00a0\u3000\u2028", " \t\n\r",
             "\u2066\u2069\u200e\u200f", ""]
TEXTS = ["the cat sat on the mat .", "it slept all day .", "the dog ran in the park .", "it was happy ."]
RULE = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def tiny():
    tok = WordTokenizer.build(TEXTS)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                     num_hidden_layers=1, max_position_embeddings=16)
    return init_model(cfg, 0).eval(), tok


@pytest.mark.parametrize("text", INVISIBLE)
def test_invisible_text_is_blank_everywhere(text, tiny):
    model, tok = tiny
    assert is_blank(text)
    with pytest.raises(InputError, match="the text is empty"):
        clean_text(text)
    with pytest.raises(InputError, match="sentence A is empty"):
        encode_pair(tok, text, "it slept .")
    with pytest.raises(InputError, match="sentence B is empty"):
        encode_pair(tok, "the cat sat .", text)
    with pytest.raises(InputError, match="sentence A of the pair is empty"):
        check_probe(Probe("the [MASK] sat .", text, "it slept ."), tok)
    with pytest.raises(InputError, match="sentence A is empty"):
        example_from_text(tok, text, "it slept .")
    if not set(text) & set("\t\n\r\x00"):  # those split the line (or make the file binary) before any rule
        with pytest.raises(CorpusError, match="empty A side"):
            load_corpus_file(f"{text}\tit slept .\nthe cat sat .\tit slept .\n".encode(), mode="pairs")
        rows = "".join(f"the {w} sat,{'ab'[i % 2]}\n" for i, w in enumerate(["cat", "dog", "cow", "hen"] * 3))
        with pytest.raises(InputError, match="the text field is empty"):
            load_task_csv(f"text,label\n{text},a\n{rows}".encode())


def test_visible_text_keeps_its_words():
    assert not is_blank("a\u200bb") and clean_text("a\u200bb") == ("a b", False)
    assert normalize("\u202ehello\x00") == " hello "
    assert not is_blank("😀") and not is_blank("中文") and not is_blank("[MASK]")
    assert is_blank(None) and not is_blank(5)
    with pytest.raises(InputError, match="must be a string"):
        clean_text(5, "the text")


def test_too_long_text_is_cut_and_read_only_up_to_the_cut():
    text, cut = clean_text("ab" * MAX_TEXT_CHARS)
    assert cut and len(text) == MAX_TEXT_CHARS
    assert clean_text("word") == ("word", False)
    late = " " * MAX_TEXT_CHARS + "word"  # the part that is read is blank
    assert is_blank(late)
    with pytest.raises(InputError, match="is empty"):
        clean_text(late)


@RULE
@given(st.text(max_size=60))
def test_is_blank_is_exactly_what_clean_text_refuses(text):
    try:
        cleaned, _ = clean_text(text)
    except InputError:
        assert is_blank(text)
    else:
        assert not is_blank(text) and cleaned.strip() and len(cleaned) == len(text)
        assert not any(unicodedata.category(c)[0] == "C" for c in cleaned)  # no control or format character left


def test_mask_positions_is_the_rule_fill_mask_follows(tiny):
    model, tok = tiny
    ids, types, truncated, pos = mask_positions(tok, "the [MASK] sat on the [MASK] .", 16)
    assert [ids[i] for i in pos] == [tok.mask_id] * 2 and not truncated and set(types) == {0}
    assert [m.position for m in fill_mask(model, tok, "the [MASK] sat on the [MASK] .").masks] == pos
    with pytest.raises(InputError, match="no \\[MASK\\]"):
        mask_positions(tok, "the cat sat .", 16)
    with pytest.raises(InputError, match="beyond the maximum length \\(16 tokens\\)"):
        mask_positions(tok, "the cat " * 20 + "[MASK]", 16)
    with pytest.raises(InputError, match="the text is empty"):
        mask_positions(tok, "\u202e\u200b\u200d", 16)


_PIECES = ["[MASK]", "[mask]", "<mask>", "the", "cat", " ", "\u200b", "\u202e", "😀", "\x00", "\n", "zebra"]
_probe_text = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=_probe_text, a=_probe_text, b=_probe_text)
def test_a_probe_the_check_accepts_is_one_training_can_ask(tiny, text, a, b):
    """What the Train page lets through (check_probe) never fails later in the training thread (run_probe)."""
    model, tok = tiny
    probe = Probe(text, a, b)
    try:
        check_probe(probe, tok, model.config.max_position_embeddings)
    except BertcoreError:
        return
    with torch.no_grad():
        row = run_probe(model, tok, probe, step=0)
    assert 0.0 <= row["p_is_next"] <= 1.0 and row["top1"]
