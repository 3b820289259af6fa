"""AppTest of the objective switches on the learning and inspection pages: Masking & NSP (masking unit, sentence
task, left-to-right targets), Predict (a SOP head, a left-to-right model, a model without a sentence task),
Attention and Inside the model (the causal mask). Every number on screen is checked against the library's."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_pages import open_page
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

from bertcore.analysis.inference import inspect_pair, next_tokens, nsp_probability
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import Corpus
from bertcore.data.masking_units import geometric_pmf
from bertcore.data.pretraining import MaskingRates, PretrainingData, mask_tokens, masking_stats
from bertcore.data.tokenization import WordPieceTokenizer
from bertcore.io.checkpoint import ModelBundle
from bertcore.model.bert import BertForPreTraining
from explorer.parts import masking_view as MV
from explorer.session import workspace

ROOT = Path(__file__).resolve().parents[1]
PRED, ATT, FWD = "app_pages/predict.py", "app_pages/attention.py", "app_pages/forward.py"
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tok():
    return workspace.shared_untrained_bundle().tokenizer


def _am(tok, label, task="nsp", **kw):
    from explorer.session.workspace import ActiveModel

    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, **SIZES, **kw)).eval()
    m.sentence_task, m.has_nsp_head = task, task != "none"  # what the trainer records (TrainConfig.sentence_task)
    return ActiveModel(ModelBundle(model=m, tokenizer=tok, name=label, source="test"), label, "trained", True)


@pytest.fixture(scope="module")
def sop(tok):
    return _am(tok, "sop model", "sop")


@pytest.fixture(scope="module")
def ltr(tok):
    return _am(tok, "left-to-right model", "none", attention_direction="left_to_right")


@pytest.fixture(scope="module")
def mlm_only(tok):
    return _am(tok, "mlm-only model", "none")


def _chart(at, key):
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith("-" + key):
            return json.loads(el.proto.spec)
    raise AssertionError(f"no chart {key!r}")


def _infos(at) -> str:
    return " | ".join(m.value for m in at.info)


# ----------------------------------------------------------------------------- Predict
def test_predict_shows_a_sop_head_as_p_in_order(sop, tok):
    at = open_page(PRED, sop)
    a, b = at.text_area(key="pred_nsp_a").value, at.text_area(key="pred_nsp_b").value
    p = nsp_probability(sop.model, tok, a, b)
    metric = next(m for m in at.metric if m.label == "P(in order)")
    assert metric.value == f"{p:.1%}"
    bars = _chart(at, f"pred_nsp_{sop.label}")["data"][0]
    assert bars["x"] == ["in order", "swapped"] and plotly_array(bars["y"])[0] == pytest.approx(p, abs=1e-6)
    assert any("sentence-order prediction" in m.value for m in at.markdown)
    assert not any(m.label == "P(IsNext)" and m.value == f"{p:.1%}" for m in at.metric)


def test_predict_gives_a_left_to_right_model_its_next_token_guesses(ltr, tok):
    at = open_page(PRED, ltr)
    text = at.text_area(key="pred_text").value
    assert "[MASK]" in text
    infos = _infos(at)
    assert "reads left to right" in infos and "cannot fill one" in infos
    want = next_tokens(ltr.model, tok, text, top_k=5)
    bars = _chart(at, f"pred_next_{ltr.label}")["data"][0]
    assert bars["y"] == [t for t, _ in want.candidates]
    assert plotly_array(bars["x"]).tolist() == pytest.approx([p for _, p in want.candidates], abs=1e-6)
    prefix = " ".join(want.tokens[1:want.position + 1])
    assert prefix and prefix in _chart(at, f"pred_next_{ltr.label}")["layout"]["title"]["text"]
    # the untrained bidirectional model beside it still fills the [MASK]
    assert any(el.proto.id.endswith(f"-pred_fm_{workspace.UNTRAINED_LABEL}_0") for el in at.get("plotly_chart"))
    assert "sentence_task = none" in infos and "published without" not in infos
    assert "head ablation is not measured" in infos


def test_predict_without_a_sentence_task_reads_right(mlm_only):
    at = open_page(PRED, mlm_only)
    infos = _infos(at)
    assert "pretrained with masked LM alone (sentence_task = none, as RoBERTa)" in infos
    assert "published without it" not in infos
    assert not any(el.proto.id.endswith(f"-pred_nsp_{mlm_only.label}") for el in at.get("plotly_chart"))


# ----------------------------------------------------------------------------- Attention, Inside the model
def test_attention_page_says_the_mask_is_causal_and_draws_the_triangle(ltr, tok):
    at = open_page(ATT, ltr)
    assert "reads left to right" in _infos(at)
    at.session_state["attn_tab"] = "One head"
    at.run()
    fig = next(json.loads(el.proto.spec) for el in at.get("plotly_chart")
               if (json.loads(el.proto.spec)["layout"].get("title") or {}).get("text", "").startswith("layer 1"))
    z = plotly_array(fig["data"][0]["z"], dtype=np.float64)
    a, b = at.text_area(key="attn_a").value, at.text_area(key="attn_b").value
    want = inspect_pair(ltr.model, tok, a, b).attentions[0, 0]
    assert z.shape == want.shape and np.allclose(z, want, atol=1e-6)
    assert (np.triu(z, 1) == 0).all() and z[0, 0] == pytest.approx(1.0)


def test_inside_the_model_masks_above_the_diagonal(ltr):
    at = open_page(FWD, ltr, fw_a="the cat eats the fish .", fw_stage="masked")
    assert any("Causal mask" in m.value for m in at.markdown)
    assert any("j > i" in x.value for x in at.latex)
    z = plotly_array(_chart(at, "fw_stage_fig")["data"][0]["z"], dtype=np.float64)
    T = z.shape[0]
    upper = np.triu(np.ones((T, T), dtype=bool), 1)
    assert np.isnan(z[upper]).all() and np.isfinite(z[~upper]).all()  # −∞ drawn as gaps, the rest finite
    assert any("the mask is causal" in m.value for m in at.markdown)


# ----------------------------------------------------------------------------- Masking & NSP
def _masking_page(am=None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app_pages" / "masking_nsp.py"), default_timeout=120)
    if am is not None:
        at.session_state[workspace.MODELS_KEY] = {am.label: am}
        at.session_state[workspace.ACTIVE_KEY] = am.label
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_masking_page_span_lengths_against_the_geometric_distribution(tok):
    at = _masking_page()
    at.radio(key="mn_unit").set_value("span").run()
    assert not at.exception
    fig = _chart(at, "mn_span_chart")
    corpus, _ = workspace.shared_corpus_and_tokenizer()
    tc = TrainConfig()
    sub = Corpus(corpus.name, list(corpus.pairs[:5000]), corpus.description)
    data = PretrainingData(sub, tok, tc.max_seq_len, MaskingRates(0.15, 0.8, 0.1, "span", 0.2, 10),
                           tc.nsp_positive_prob, 0.0, 0)
    want = masking_stats(data, 5000, 5000)  # the convergence chart's last point: N = 5000, seed 0 + N
    assert plotly_array(fig["data"][0]["y"]).tolist() == pytest.approx(want["span_lengths"], abs=1e-6)
    assert plotly_array(fig["data"][1]["y"]).tolist() == pytest.approx(geometric_pmf(0.2, 10), abs=1e-6)
    assert f"{want['span_mean_drawn']:.2f}" in fig["layout"]["title"]["text"]
    grid = _chart(at, "mn_mask_chart")["data"][0]
    text, z = grid["text"], plotly_array(grid["z"])
    unit_row = 5  # token, id, segment, position, decision, unit: the tokens of one span share one action
    assert all(t == "·" for t, code in zip(text[unit_row], z[0]) if code not in (1, 2, 3))
    by_unit: dict[str, set] = {}
    for t, code in zip(text[unit_row], z[0]):
        if t != "·":
            by_unit.setdefault(t, set()).add(int(code))
    assert by_unit and all(len(codes) == 1 for codes in by_unit.values())


def test_masking_page_sop_pairs_in_order_and_swapped(tok):
    at = _masking_page()
    at.radio(key="mn_task").set_value("sop").run()
    table = at.table[0].value
    a, b = workspace.shared_corpus_and_tokenizer()[0].pairs[0]
    words = lambda s: " ".join(tok.tokenize(s))  # noqa: E731
    assert list(table.iloc[:, 0]) == [words(a), words(b)] and list(table.iloc[:, 1]) == [words(b), words(a)]
    assert list(table.iloc[:, 3]) == ["0 = in order", "1 = swapped"]
    at.radio(key="mn_task").set_value("none").run()
    table = at.table[0].value
    assert len(table) == 1 and list(table.iloc[:, 0]) == [words(a)]
    assert any("RoBERTa" in c.value for c in at.caption)


def test_masking_page_shows_a_left_to_right_models_next_token_targets(ltr, tok):
    at = _masking_page(ltr)
    assert at.radio(key="mn_direction").value == "left_to_right"  # the active model's direction
    grid = _chart(at, "mn_next_chart")["data"][0]
    tokens, labels = grid["text"][0], [int(v) for v in grid["text"][5]]
    ids = tok.convert_tokens_to_ids(tokens)
    for t in range(len(ids)):
        nxt_real = t + 1 < len(ids) and ids[t + 1] not in tok.special_ids
        assert labels[t] == (ids[t + 1] if nxt_real else -100)
    assert not any(el.proto.id.endswith("-mn_mask_chart") for el in at.get("plotly_chart"))
    assert "masks nothing" in _infos(at)


@pytest.mark.parametrize("unit", ["whole_word", "span"])
def test_selection_units_read_back_the_draw_mask_tokens_makes(unit):
    """The page's unit row (masking_view.selection_units) comes from the same draws as mask_tokens: the selected
    tokens are exactly those with a unit, a unit's tokens share one action, and a whole word is never split."""
    texts = ["the quick brown foxes jumped over sleeping dogs .", "unbelievable kittens nibble crunchy kibble ."]
    wp = WordPieceTokenizer.train(texts * 20, vocab_size=60)
    rates = MaskingRates(0.3, unit=unit)
    ids = [wp.cls_id, *wp.encode(texts[0]), wp.sep_id, *wp.encode(texts[1]), wp.sep_id]
    seen_split = False
    for seed in range(40):
        _, _, dec = mask_tokens(ids, wp, rates, torch.Generator().manual_seed(seed))
        units = MV.selection_units(ids, wp, rates, seed)
        actions: dict[int, set] = {}
        for d, u in zip(dec, units):
            if d.selected:
                assert u >= 0
                actions.setdefault(u, set()).add(d.action)
        assert all(len(a) == 1 for a in actions.values())
        if unit == "span":
            assert [d.selected for d in dec] == [u >= 0 for u in units]
        else:
            n_words, n_tokens, intact = MV.whole_words_intact(dec, units)
            assert intact and n_tokens >= n_words >= 1
            seen_split |= n_tokens > n_words
    assert unit == "span" or seen_split  # some selected word had several pieces
