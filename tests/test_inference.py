"""Inference: fill-mask (BERT §3.1), P(IsNext) (§3.2), pair inspection, input validation."""

import numpy as np
import pytest
import torch

from bertcore.config import BertConfig
from bertcore.errors import InputError
from bertcore.analysis.inference import encode_pair, fill_mask, inspect_pair, nsp_probability
from bertcore.data.tokenization import WordTokenizer
from bertcore.model.bert import init_model

TEXTS = ["the cat eats the fish .", "then it sleeps under the table .", "two dogs run in the park ."]


@pytest.fixture(scope="module")
def mt():
    tok = WordTokenizer.build(TEXTS)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=16)
    return init_model(cfg, 0).eval(), tok


def test_fill_mask_probabilities_sorted_and_multiple_masks(mt):
    model, tok = mt
    r = fill_mask(model, tok, "the [MASK] eats the [MASK] .", top_k=4)
    assert r.tokens == ["[CLS]", "the", "[MASK]", "eats", "the", "[MASK]", ".", "[SEP]"]
    assert [m.position for m in r.masks] == [2, 5] and not r.truncated
    for m in r.masks:
        probs = [p for _, p in m.candidates]
        assert len(probs) == 4 and probs == sorted(probs, reverse=True)
        assert all(0 <= p <= 1 for p in probs) and sum(probs) <= 1 + 1e-6
        assert all(t in tok.token_to_id for t, _ in m.candidates)
    # top_k larger than the vocabulary is capped; all of it sums to 1
    full = fill_mask(model, tok, "[MASK]", top_k=1000)
    assert len(full.masks[0].candidates) == tok.vocab_size
    assert sum(p for _, p in full.masks[0].candidates) == pytest.approx(1.0, abs=1e-5)


def test_fill_mask_matches_model_logits(mt):
    model, tok = mt
    r = fill_mask(model, tok, "the cat [MASK] the fish .", top_k=1)
    ids, types, _ = encode_pair(tok, "the cat [MASK] the fish .")
    with torch.no_grad():
        logits = model(torch.tensor([ids]), torch.tensor([types])).mlm_logits[0, 3]
    best = int(logits.argmax())
    assert r.masks[0].candidates[0][0] == tok.vocab[best]
    assert r.masks[0].candidates[0][1] == pytest.approx(float(torch.softmax(logits, -1)[best]), abs=1e-6)


@pytest.mark.parametrize("text,needle", [("", "empty"), ("   \n\t", "empty"), ("\x00\x07", "empty"),
                                         ("the cat eats", "[MASK]")])
def test_fill_mask_errors(mt, text, needle):
    model, tok = mt
    with pytest.raises(InputError, match=None) as e:
        fill_mask(model, tok, text)
    assert needle in str(e.value)


def test_fill_mask_bad_top_k_and_no_head(mt):
    model, tok = mt
    with pytest.raises(InputError, match="top_k"):
        fill_mask(model, tok, "[MASK]", top_k=0)
    model.has_mlm_head = False
    try:
        with pytest.raises(InputError, match="no MLM head"):
            fill_mask(model, tok, "the [MASK] .")
    finally:
        model.has_mlm_head = True
    model.has_nsp_head = False
    try:
        with pytest.raises(InputError, match="no NSP head"):
            nsp_probability(model, tok, "a", "b")
    finally:
        model.has_nsp_head = True


def test_long_text_many_masks_and_control_chars(mt):
    model, tok = mt
    r = fill_mask(model, tok, "[MASK] " + "the cat " * 5000)
    assert r.truncated and len(r.tokens) == 16 and [m.position for m in r.masks] == [1]
    r = fill_mask(model, tok, " ".join(["[MASK]"] * 20), top_k=2)
    assert r.truncated and len(r.masks) == 14
    r = fill_mask(model, tok, "the\x00 cat\x1b [MASK] 🐱 日本")
    assert r.tokens[:3] == ["[CLS]", "the", "cat"] and "[MASK]" in r.tokens
    with pytest.raises(InputError, match="beyond"):
        fill_mask(model, tok, "the cat " * 50 + "[MASK]")


def test_nsp_probability_in_unit_interval(mt):
    model, tok = mt
    for a, b in [("the cat eats .", "it sleeps ."), ("x", "y" * 1000), ("[CLS] [SEP]", "🐱")]:
        p = nsp_probability(model, tok, a, b)
        assert isinstance(p, float) and 0.0 <= p <= 1.0
    with pytest.raises(InputError):
        nsp_probability(model, tok, "the cat", " ")
    with pytest.raises(InputError):
        nsp_probability(model, tok, "", "the cat")


def test_encode_pair_truncates_longest_first(mt):
    _, tok = mt
    ids, types, trunc = encode_pair(tok, "the cat eats", "it sleeps", max_len=16)
    assert not trunc and ids[0] == tok.cls_id and ids.count(tok.sep_id) == 2
    assert types == [0] * 5 + [1] * 3
    ids, types, trunc = encode_pair(tok, "the cat " * 10, "it sleeps", max_len=10)
    assert trunc and len(ids) == 10 and types.count(1) == 3  # B (2 tokens + [SEP]) kept whole
    ids, types, trunc = encode_pair(tok, "the cat " * 10, "it sleeps " * 10, max_len=11)
    assert trunc and len(ids) == 11 and types.count(0) == 1 + 4 + 1 and types.count(1) == 4 + 1


def test_inspect_shapes_and_training_flag_restored(mt):
    model, tok = mt
    model.train()
    try:
        r = inspect_pair(model, tok, "the cat eats the fish .", "then it sleeps .")
        assert model.training
    finally:
        model.eval()
    L, H, D = 2, 4, 32
    T = len(r.tokens)
    assert r.tokens[0] == "[CLS]" and r.tokens[r.sep_index] == "[SEP]" and r.sep_index == 7
    assert r.segment_ids == [0] * 8 + [1] * (T - 8) and len(r.input_ids) == T
    assert r.attentions.shape == (L, H, T, T) and r.attentions.dtype == np.float32
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert r.hidden_states.shape == (L + 1, T, D)
    assert set(r.embeddings) == {"token", "position", "segment", "sum", "normed"}
    for v in r.embeddings.values():
        assert v.shape == (T, D)
    np.testing.assert_allclose(r.embeddings["sum"], r.embeddings["token"] + r.embeddings["position"]
                               + r.embeddings["segment"], atol=1e-6)
    again = inspect_pair(model, tok, "the cat eats the fish .", "then it sleeps .")  # eval: deterministic
    np.testing.assert_array_equal(r.attentions, again.attentions)
    single = inspect_pair(model, tok, "the cat")
    assert single.tokens == ["[CLS]", "the", "cat", "[SEP]"] and single.segment_ids == [0, 0, 0, 0]


