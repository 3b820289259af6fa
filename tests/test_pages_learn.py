"""AppTest of the Learn pages (Data & tokens, Masking & NSP, Positional encoding).

Each page is opened through app.py (st.navigation) and driven with its widgets; what is shown is
checked on the figure data (plotly specs in the element proto). Bad inputs must give a message and
never an exception element.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import plotly_array
from streamlit.testing.v1 import AppTest

from bertcore.model.functional import sinusoidal_table

BAD_TEXTS = {
    "empty": "",
    "spaces": "   \n\t ",
    "50k": "the cat sat on the mat . " * 2000,  # 50,000 characters
    "emoji": "the 😀 cat 🐈 sat 日本語 на ковре عربى",
    "control": "the\x00cat\x07sat\x1b[31m on\u200b the\x7fmat",
    "specials": "[CLS] the cat [SEP] sat [SEP] [PAD]",
    "masks": " ".join(["[MASK]"] * 20),
    "unknown": "xylophone quantum zeppelin flibbertigibbet",
}


arr = plotly_array


def chart(at: AppTest, key: str) -> dict:
    """The plotly figure drawn by st.plotly_chart(..., key=key)."""
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith("-" + key):
            return json.loads(el.proto.spec)
    raise AssertionError(f"no chart {key!r}; have {[el.proto.id for el in at.get('plotly_chart')]}")


def has_chart(at: AppTest, key: str) -> bool:
    return any(el.proto.id.endswith("-" + key) for el in at.get("plotly_chart"))


def messages(at: AppTest) -> list[str]:
    return [m.value for kind in ("error", "warning", "info", "success") for m in getattr(at, kind)]


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception] + [e.stack_trace for e in at.exception]


ROOT = Path(__file__).resolve().parents[1]


def test_learn_pages_render_through_app():
    """Each Learn page renders inside app.py (st.navigation + shared sidebar) with no exception."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    if at.exception:  # the default page may fail while other pages are under construction; not ours
        warnings.warn("app.py's default page raised: " + "; ".join(e.message for e in at.exception), stacklevel=2)
    for fname, title, key in (("data_tokens.py", "Data & tokens", "dt_len_chart"),
                              ("masking_nsp.py", "Masking & NSP", "mn_mask_chart"),
                              ("positional_encoding.py", "Positional encoding", "pe_table_chart")):
        at.switch_page(f"app_pages/{fname}").run()
        no_exception(at)
        assert at.title[0].value == title
        assert has_chart(at, key)


def open_page(fname: str) -> AppTest:
    """The page file on its own (widget interaction through app.py does not reach page widgets in
    AppTest with this app's navigation; the render-through-app check is above)."""
    at = AppTest.from_file(str(ROOT / "app_pages" / fname), default_timeout=60).run()
    no_exception(at)
    return at


# ----------------------------------------------------------------------------- Positional encoding
@pytest.fixture(scope="module")
def pe():
    return open_page("positional_encoding.py")


def test_positional_renders_table_from_sinusoidal_table(pe):
    assert pe.title[0].value == "Positional encoding"
    assert any("sin" in x.value for x in pe.latex)
    z = arr(chart(pe, "pe_table_chart")["data"][0]["z"])
    np.testing.assert_array_equal(z, sinusoidal_table(64, 64).numpy())
    for key in ("pe_curves_chart", "pe_sim_chart", "pe_learned_chart", "pe_embed_chart"):
        assert has_chart(pe, key)
    # the untrained default model is labelled as such
    assert any("untrained" in m.lower() or "random" in m.lower() for m in messages(pe))


def test_positional_widgets_change_figures(pe):
    pe.slider(key="pe_d_model").set_value(16)
    pe.slider(key="pe_max_len").set_value(20).run()
    no_exception(pe)
    z = arr(chart(pe, "pe_table_chart")["data"][0]["z"])
    np.testing.assert_array_equal(z, sinusoidal_table(20, 16).numpy())
    sim = arr(chart(pe, "pe_sim_chart")["data"][0]["z"])
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)  # cosine by default
    pe.radio(key="pe_sim_kind").set_value("dot product").run()
    sim = arr(chart(pe, "pe_sim_chart")["data"][0]["z"])
    np.testing.assert_allclose(np.diag(sim), 8.0, atol=1e-4)  # d/2 (sin² + cos²) per position
    pe.multiselect(key="pe_dims_16").set_value([2, 3]).run()
    curves = chart(pe, "pe_curves_chart")["data"]
    assert len(curves) == 2
    np.testing.assert_array_equal(arr(curves[1]["y"]), sinusoidal_table(20, 16).numpy()[:, 3])
    pe.multiselect(key="pe_dims_16").set_value([]).run()
    assert not has_chart(pe, "pe_curves_chart") and any("dimension" in m for m in messages(pe))
    # learned panel: same size as the active model's table (64 positions)
    learned = chart(pe, "pe_learned_chart")["data"]
    assert arr(learned[0]["z"]).shape == arr(learned[1]["z"]).shape == (64, 64)


def test_positional_sentence_embeddings(pe):
    pe.text_input(key="pe_sent_a").set_value("the cat sat")
    pe.text_input(key="pe_sent_b").set_value("it was happy").run()
    no_exception(pe)
    data = chart(pe, "pe_embed_chart")["data"]
    assert len(data) == 5
    zs = [arr(d["z"]) for d in data]  # token, segment, position, sum, normed
    assert zs[0].shape[0] == 9  # [CLS] the cat sat [SEP] it was happy [SEP]
    np.testing.assert_allclose(zs[3], zs[0] + zs[1] + zs[2], atol=1e-5)


@pytest.mark.parametrize("case", list(BAD_TEXTS))
def test_positional_bad_inputs(pe, case):
    pe.text_input(key="pe_sent_a").set_value(BAD_TEXTS[case])
    pe.text_input(key="pe_sent_b").set_value(BAD_TEXTS[case] if case in ("masks", "50k") else "").run()
    no_exception(pe)
    msgs = messages(pe)
    if case in ("empty", "spaces"):
        assert any("Type a sentence" in m for m in msgs)
    elif case == "50k":
        assert any("truncated" in m for m in msgs)
    else:
        assert has_chart(pe, "pe_embed_chart")


# ----------------------------------------------------------------------------- Data & tokens
@pytest.fixture(scope="module")
def dt():
    return open_page("data_tokens.py")


def test_data_renders_stats(dt):
    assert dt.title[0].value == "Data & tokens"
    bars = chart(dt, "dt_len_chart")["data"][0]
    assert arr(bars["y"]).sum() == 24000  # one count per pair of the built-in corpus
    assert dt.session_state["bx_corpus_choice"].corpus.name.startswith("builtin")
    assert has_chart(dt, "dt_top_chart") and has_chart(dt, "dt_tokens_chart")
    metrics = {m.label: m.value for m in dt.metric}
    assert metrics["sentence pairs"] == "24,000"


def test_data_wordpiece_size_help_counts_the_specials_it_names(dt):
    """The WordPiece size's help counts the special tokens the tokenizer really reserves (ids 0..4)."""
    from bertcore.data.tokenization import WordPieceTokenizer

    tok = WordPieceTokenizer.train(["the cat sat on the mat"] * 3, vocab_size=60)
    specials = tok.convert_ids_to_tokens(sorted(tok.special_ids))
    help_text = dt.slider(key="dt_vocab_size").help
    assert f"including the {len(specials)} special tokens ({' '.join(specials)})" in help_text


def test_data_vocab_search_and_tokenizer_switch(dt):
    dt.text_input(key="dt_vocab_q").set_value("cat").run()
    df = dt.dataframe[0].value
    assert len(df) > 0 and df["token"].str.contains("cat").all()
    dt.text_input(key="dt_vocab_q").set_value("[(*").run()  # regex characters are plain text
    no_exception(dt)
    assert len(dt.dataframe[0].value) == 0
    dt.text_input(key="dt_vocab_q").set_value("").run()
    word_vocab = dt.metric[2].value
    dt.radio(key="dt_kind").set_value("WordPiece").run()
    dt.slider(key="dt_vocab_size").set_value(200).run()
    no_exception(dt)
    assert dt.metric[2].value != word_vocab
    dt.text_area(key="dt_text").set_value("the hippopotamus").run()
    assert any("##" in " ".join(map(str, d.value["pieces"])) for d in dt.dataframe if "pieces" in d.value)
    toks = chart(dt, "dt_tokens_chart")["data"][0]["text"][0]
    assert toks[0] == "the" and any(t.startswith("##") for t in toks)
    dt.radio(key="dt_kind").set_value("word-level").run()


@pytest.mark.parametrize("case", list(BAD_TEXTS))
def test_data_bad_texts(dt, case):
    dt.text_area(key="dt_text").set_value(BAD_TEXTS[case]).run()
    no_exception(dt)
    msgs = messages(dt)
    if case in ("empty", "spaces"):
        assert any("Type some text" in m for m in msgs)
        return
    assert msgs
    toks = chart(dt, "dt_tokens_chart")["data"][0]["text"][0]
    if case == "50k":
        assert len(toks) == 200 and any("first 200" in m for m in msgs)
    if case in ("emoji", "unknown"):
        assert "[UNK]" in toks and any("not in the vocabulary" in m for m in msgs)
    if case == "specials":
        assert toks[0] == "[CLS]" and "[SEP]" in toks
    if case == "masks":
        assert toks == ["[MASK]"] * 20


def test_data_uploads(dt):
    dt.radio(key="dt_source").set_value("upload a .txt file").run()
    no_exception(dt)
    assert any("Upload" in m for m in messages(dt))
    good = "".join(f"sentence {i} of a.\tsentence {i} of b.\r\n" for i in range(30)).encode()
    dt.file_uploader(key="dt_upload").set_value(("mine.txt", good, "text/plain")).run()
    no_exception(dt)
    assert dt.session_state["bx_corpus_choice"].corpus.name == "mine.txt"
    assert arr(chart(dt, "dt_len_chart")["data"][0]["y"]).sum() == 30
    bad_files = {
        "empty": b"",
        "binary": b"\x00\x01\x02binary\x00",
        "latin1": "caf\xe9\tna\xefve\n".encode("latin-1") * 3,
        "one line": b"just one sentence here",
        "no tab": b"a\tb\nno tab on this line\n",
    }
    for name, data in bad_files.items():
        mode = "pairs" if name == "no tab" else "auto"
        dt.radio(key="dt_mode").set_value(mode)
        dt.file_uploader(key="dt_upload").set_value((f"{name}.txt", data, "text/plain")).run()
        no_exception(dt)
        assert dt.error, name
        assert dt.session_state["bx_corpus_choice"].corpus.name == "mine.txt", name  # the previous corpus is kept
    dt.radio(key="dt_mode").set_value("auto")
    dt.radio(key="dt_source").set_value("tutorial two-liner").run()
    assert dt.session_state["bx_corpus_choice"].corpus.name == "tutorial"
    assert arr(chart(dt, "dt_len_chart")["data"][0]["y"]).sum() == 2
    dt.radio(key="dt_source").set_value("built-in").run()
    assert dt.session_state["bx_corpus_choice"].corpus.name.startswith("builtin")


# ----------------------------------------------------------------------------- Masking & NSP
@pytest.fixture(scope="module")
def mn():
    return open_page("masking_nsp.py")


def _mask_rows(at):
    d = chart(at, "mn_mask_chart")["data"][0]
    return arr(d["z"]), d["text"]


def test_masking_renders(mn):
    assert mn.title[0].value == "Masking & NSP"
    z, text = _mask_rows(mn)
    assert text[0][0] == "[CLS]" and text[0][-1] == "[SEP]"
    labels = [int(v) for v in text[7]]
    for p, lab in enumerate(labels):  # label row: -100 exactly where not selected
        selected = z[0, p] in (1, 2, 3)
        assert (lab != -100) == selected
    nsp = mn.table[0].value
    assert list(nsp["NSP label"]) == ["0 = IsNext", "1 = NotNext"]
    assert nsp["sentence B"][0] != nsp["sentence B"][1]
    stats = chart(mn, "mn_stats_chart")
    assert len(stats["data"]) == 4
    assert sorted(round(s["y0"], 4) for s in stats["layout"]["shapes"]) == [0.1, 0.1, 0.15, 0.8]


def test_masking_seed_redraw_and_rates(mn):
    before = _mask_rows(mn)[1]
    mn.button(key="mn_redraw").click().run()
    no_exception(mn)
    assert mn.number_input(key="mn_seed").value == 1
    mn.slider(key="mn_rate").set_value(0.9).run()
    z, text = _mask_rows(mn)
    assert (z[0] != 0).sum() >= 0.5 * len(text[0])  # most tokens selected
    assert text != before
    stats = chart(mn, "mn_stats_chart")["data"][0]
    assert abs(arr(stats["y"])[-1] - 0.9) < 0.05  # converges to the configured selection rate
    mn.slider(key="mn_mask").set_value(0.95).run()
    no_exception(mn)
    assert mn.error and "> 1" in mn.error[0].value
    mn.slider(key="mn_mask").set_value(0.8)
    mn.slider(key="mn_rate").set_value(0.15).run()
    mn.slider(key="mn_index").set_value(5).run()
    from bertcore.data.corpus import builtin_corpus

    assert mn.table[0].value["sentence A"][0] == builtin_corpus(seed=0).pairs[5][0]


def test_masking_legend_and_text_follow_the_sliders():
    """Issue 26: with the sliders at selection 0.2, [MASK] 0.6, random 0.3 (so 0.1 kept) the decision row's legend,
    the intro, the kept caption and the convergence chart all state those shares; nothing on the page still says
    80/10/10 as if it were in use (BERT's own rates are named as BERT's)."""
    at = open_page("masking_nsp.py")
    legend = [t["name"] for t in chart(at, "mn_mask_chart")["data"][1:]]
    assert legend[1:4] == ["selected → [MASK] (80%)", "selected → random token (10%)", "selected → kept as is (10%)"]
    at.slider(key="mn_rate").set_value(0.2)
    at.slider(key="mn_mask").set_value(0.6)
    at.slider(key="mn_random").set_value(0.3).run()
    no_exception(at)
    legend = [t["name"] for t in chart(at, "mn_mask_chart")["data"][1:]]
    assert legend[1:4] == ["selected → [MASK] (60%)", "selected → random token (30%)", "selected → kept as is (10%)"]
    intro = " ".join(next(m.value for m in at.markdown if "Masked LM" in m.value).split())
    assert "20% with the sliders below (BERT: 15%)" in intro
    assert "60% are replaced by `[MASK]`, 30% by a random token and 10% are" in intro
    assert any(c.value.startswith("Kept unchanged: 10% of the selected") for c in at.caption)
    rule = next(c.value for c in at.caption if c.value.startswith("**Selection rule**"))
    assert "n x 0.2 " in rule and "Of the selected: 0.6 -> [MASK], 0.3 -> a random token, 0.1 kept" in rule
    stats = chart(at, "mn_stats_chart")
    assert [t["name"] for t in stats["data"]] == ["selected / maskable tokens (set: 20%)",
                                                  "[MASK] share of selected (set: 60%)",
                                                  "random share of selected (set: 30%)",
                                                  "kept share of selected (set: 10%)"]
    assert sorted(round(sh["y0"], 4) for sh in stats["layout"]["shapes"]) == [0.1, 0.2, 0.3, 0.6]
    nsp = next(c.value for c in at.caption if "nsp_positive_prob" in c.value)
    from bertcore.config import TrainConfig

    assert f"({TrainConfig().nsp_positive_prob:g} by default" in nsp


@pytest.mark.parametrize("case", list(BAD_TEXTS))
def test_masking_bad_inputs(mn, case):
    mn.radio(key="mn_source").set_value("type a pair").run()
    mn.text_input(key="mn_text_a").set_value(BAD_TEXTS[case])
    mn.text_input(key="mn_text_b").set_value("it was happy .").run()
    no_exception(mn)
    msgs = messages(mn)
    if case in ("empty", "spaces"):
        assert any("Type a sentence A" in m for m in msgs)
        return
    _, text = _mask_rows(mn)
    if case == "50k":
        assert len(text[0]) == 48 and any("truncated" in m for m in msgs)
    if case == "masks":  # typed [MASK]s are special: never selected, labels -100
        assert text[0].count("[MASK]") == 20
    assert mn.table  # NSP example with a random corpus B


# ----------------------------------------------------------------------------- the seeds on screen (issue 12)
def test_tutorial_corpus_shows_the_bert_pytorch_example_and_its_selection_rate():
    """Data & tokens' choice travels to Masking & NSP (explorer.session.corpus_state). With the seed's two-line corpus the
    page shows seed 003's own ids, labels 1/2 with 0 for padding, padding to 20, and the rate the at-least-one
    rule really gives on such short pairs (above the slider's 15%)."""
    from bertcore.data.corpus import tutorial_corpus
    from explorer.session.corpus_state import CorpusChoice

    at = AppTest.from_file(str(ROOT / "app_pages" / "masking_nsp.py"), default_timeout=60)
    at.session_state["bx_corpus_choice"] = CorpusChoice(tutorial_corpus(), "tutorial")
    at.run()
    no_exception(at)
    rows = next(d.value for d in at.dataframe if "bert_input" in d.value)
    assert rows["bert_input"].tolist() == [3, 4, 14, 5, 2, 5, 10, 2] + [0] * 12
    assert rows["segment_label"].tolist() == [1] * 5 + [2] * 3 + [0] * 12
    assert rows["mask (x > 0)"].tolist() == [1] * 8 + [0] * 12
    assert any(f"pads with 0 to {len(rows)} positions (its seq_len)" in m.value for m in at.markdown)
    metric = next(m for m in at.metric if m.label == "selected on this corpus")
    assert float(metric.value.rstrip("%")) / 100 > 0.15 + 0.02
    assert any("max(1, round(n x 0.15))" in c.value for c in at.caption)


def test_overview_formulas_follow_the_active_model():
    """The Overview writes the loss from the active model's config: the NSP loss over both labels."""
    from bertcore.config import BertConfig
    from bertcore.model.formulas import formulas

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    no_exception(at)
    shown = [x.value.strip("$\n") for x in at.latex]
    f = formulas(BertConfig())
    assert f["nsp"] in shown and f["mlm"] in shown
    assert r"\mathrm{IsNext}, \mathrm{NotNext}" in f["nsp"]
