"""explorer/figures/learn.py: each figure draws exactly the numbers bertcore computed."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import plotly_array

from bertcore.data.corpus import builtin_corpus, tutorial_corpus
from bertcore.data.pretraining import MaskingRates, PretrainingData, build_pair, mask_tokens, masking_stats
from bertcore.data.tokenization import WordTokenizer
from bertcore.model.functional import sinusoidal_table
from explorer.figures import learn as F

arr = plotly_array


def spec(fig) -> dict:
    """The figure as the browser receives it (what st.plotly_chart sends)."""
    return json.loads(fig.to_json())


@pytest.fixture(scope="module")
def corpus_tok():
    c = builtin_corpus(seed=0, n_pairs=300)
    return c, WordTokenizer.build(c.texts())


def test_pe_heatmap_is_the_sinusoidal_table():
    table = sinusoidal_table(50, 16).numpy()
    z = arr(spec(F.pe_table_figure(table))["data"][0]["z"])
    assert z.dtype == np.float32 and z.shape == (50, 16)
    np.testing.assert_array_equal(z, table)
    # Vaswani §3.5 spot check: PE(pos, 2i) = sin(pos / 10000^(2i/d))
    assert z[7, 4] == pytest.approx(np.sin(7 / 10000 ** (4 / 16)), abs=1e-6)
    assert z[7, 5] == pytest.approx(np.cos(7 / 10000 ** (4 / 16)), abs=1e-6)


def test_pe_curves_are_table_columns():
    table = sinusoidal_table(40, 8).numpy()
    data = spec(F.pe_curves_figure(table, [0, 3, 99]))["data"]
    assert len(data) == 2  # out-of-range dimension 99 is skipped
    np.testing.assert_array_equal(arr(data[0]["y"]), table[:, 0])
    np.testing.assert_array_equal(arr(data[1]["y"]), table[:, 3])
    assert "sin" in data[0]["name"] and "cos" in data[1]["name"]


def test_similarity_cosine_and_dot():
    table = sinusoidal_table(30, 12).numpy()
    cos = F.similarity(table, "cosine")
    np.testing.assert_allclose(np.diag(cos), 1.0, atol=1e-6)
    np.testing.assert_allclose(cos, cos.T, atol=1e-6)
    dot = F.similarity(table, "dot")
    np.testing.assert_allclose(dot, table.astype(np.float64) @ table.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.diag(dot), 6.0, atol=1e-5)  # sin^2 + cos^2 = 1 per pair, d/2 pairs
    z = arr(spec(F.similarity_figure(cos, "cosine", "x"))["data"][0]["z"])
    np.testing.assert_array_equal(z, cos)
    with pytest.raises(ValueError):
        F.similarity(table, "euclid")


def test_side_by_side_similarity_panels():
    a, b = np.random.default_rng(0).normal(size=(10, 4)), sinusoidal_table(10, 4).numpy()
    data = spec(F.side_by_side_similarity(F.similarity(a, "dot"), F.similarity(b, "dot"), "dot", "l", "r"))["data"]
    np.testing.assert_allclose(arr(data[0]["z"]), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(arr(data[1]["z"]), b @ b.T, rtol=1e-5, atol=1e-5)


def test_length_histogram_counts_sum_to_pairs(corpus_tok):
    corpus, tok = corpus_tok
    lengths = [len(tok.tokenize(a)) + len(tok.tokenize(b)) for a, b in corpus.pairs]
    bar = spec(F.length_histogram(lengths, max_seq_len=48))["data"][0]
    xs, ys = arr(bar["x"]), arr(bar["y"])
    assert ys.sum() == len(corpus.pairs)
    want = Counter(lengths)
    assert {int(x): int(y) for x, y in zip(xs, ys) if y} == dict(want)
    assert spec(F.length_histogram([]))["data"][0]  # empty input still makes a figure


def test_top_words_bar():
    counts = Counter("the the the cat cat sat on the mat mat".split())
    bar = spec(F.top_words_bar(counts, k=3))["data"][0]
    assert bar["y"] == ["the", "cat", "mat"]
    np.testing.assert_array_equal(arr(bar["x"]), [4, 2, 2])


def test_tokens_figure_marks_unk_pieces_and_specials():
    tokens, ids = ["[CLS]", "play", "##ing", "[UNK]"], [2, 9, 10, 1]
    d = spec(F.tokens_figure(tokens, ids))["data"][0]
    z = arr(d["z"])
    assert list(z[0]) == [F.TOKEN_CODE[k] for k in ("special", "known", "piece", "unk")]
    assert d["text"] == [tokens, ["2", "9", "10", "1"]]


def test_masking_figure_colours_match_decisions(corpus_tok):
    corpus, tok = corpus_tok
    a, b = corpus.pairs[0]
    ids, types = build_pair(tok, tok.encode(a), tok.encode(b), 48)
    gen = torch.Generator().manual_seed(3)
    rates = MaskingRates(0.6, 0.5, 0.25)
    masked, labels, decisions = mask_tokens(ids, tok, rates, gen)
    special = [i for i, t in enumerate(ids) if t in tok.special_ids]
    fig = F.masking_figure(tok.convert_ids_to_tokens(ids), ids, types, decisions,
                           tok.convert_ids_to_tokens(masked), masked, labels, special, rates=rates)
    d = spec(fig)["data"][0]
    z, text = arr(d["z"]), d["text"]
    rows = ["token", "id", "segment id", "position", "decision", "model input", "input id", "MLM label"]
    for p, dec in enumerate(decisions):
        want = dec.action if dec.selected else ("special" if p in special else "none")
        for r in ("token", "decision", "model input", "MLM label"):
            assert z[rows.index(r), p] == F.MASK_CODE[want]
        assert z[rows.index("segment id"), p] == F.MASK_CODE["seg_a" if types[p] == 0 else "seg_b"]
        assert text[rows.index("MLM label")][p] == str(labels[p])
        assert text[rows.index("input id")][p] == str(masked[p])
        if dec.selected:
            assert labels[p] == dec.original_id
            if dec.action == "random":
                assert text[rows.index("decision")][p] == f"→ {dec.placed}"
        else:
            assert labels[p] == -100
    acts = {d.action for d in decisions if d.selected}
    assert acts, "with a 60% rate something is selected"
    legend = [t["name"] for t in spec(fig)["data"][1:]]  # the shares the decisions were drawn with
    assert legend[1:4] == ["selected → [MASK] (50%)", "selected → random token (25%)", "selected → kept as is (25%)"]
    assert text[0] == tok.convert_ids_to_tokens(ids)
    assert text[rows.index("segment id")] == [str(t) for t in types]


def test_convergence_figure_lines_and_configured(corpus_tok):
    corpus, tok = corpus_tok
    data = PretrainingData(corpus, tok, 48, MaskingRates(), 0.5, 0.0, 0)
    draws = [1, 10, 100, 1000]
    stats = [masking_stats(data, n, n) for n in draws]
    configured = {"selected_rate": 0.15, "mask_share": 0.8, "random_share": 0.1, "keep_share": 0.1}
    s = spec(F.masking_convergence_figure(stats, configured))
    assert len(s["data"]) == 4
    assert [t["name"] for t in s["data"]] == ["selected / maskable tokens (set: 15%)", "[MASK] share of selected "
                                              "(set: 80%)", "random share of selected (set: 10%)",
                                              "kept share of selected (set: 10%)"]
    seed = spec(F.masking_convergence_figure(stats, {"mask_share": 0.6}, "<mask>"))
    assert seed["data"][1]["name"] == "&lt;mask&gt; share of selected (set: 60%)"  # escaped: plotly reads tags
    for trace, (key, _, _) in zip(s["data"], F.STAT_LINES):
        np.testing.assert_array_equal(arr(trace["x"]), draws)
        np.testing.assert_allclose(arr(trace["y"]), [st[key] for st in stats], rtol=1e-6)
    hlines = sorted(round(sh["y0"], 6) for sh in s["layout"]["shapes"])
    assert hlines == sorted(configured.values())
    # converges: the 1000-draw estimate is close to the configured rates
    last = stats[-1]
    assert abs(last["selected_rate"] - 0.15) < 0.02 and abs(last["mask_share"] - 0.8) < 0.05


def test_embedding_stack_figure_shows_inspect_pair_parts(corpus_tok):
    from bertcore.analysis.inference import inspect_pair
    from bertcore.config import BertConfig
    from bertcore.model.bert import BertForPreTraining

    _, tok = corpus_tok
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2,
                                          intermediate_size=32)).eval()
    ins = inspect_pair(model, tok, "the cat sat", "it was happy")
    emb = ins.embeddings
    np.testing.assert_allclose(emb["sum"], emb["token"] + emb["segment"] + emb["position"], atol=1e-6)
    s = spec(F.embedding_stack_figure(emb, ins.tokens))
    keys = [k for k, _ in F.EMBEDDING_PARTS]
    assert len(s["data"]) == len(keys)
    for trace, key in zip(s["data"], keys):
        np.testing.assert_array_equal(arr(trace["z"]), emb[key].astype(np.float32))
        assert len(trace["y"]) == len(ins.tokens)


@pytest.mark.parametrize("share,text", [(0.8, "80%"), (0.1, "10%"), (1 - 0.6 - 0.3, "10%"), (0.125, "12.5%"),
                                        (0.0, "0%"), (1.0, "100%"), (0.05, "5%")])
def test_percent_writes_the_share_it_is_given(share, text):
    assert F.percent(share) == text


def test_tutorial_corpus_histogram():
    c = tutorial_corpus()
    tok = WordTokenizer.build(c.texts())
    lengths = [len(tok.tokenize(a)) + len(tok.tokenize(b)) for a, b in c.pairs]
    assert arr(spec(F.length_histogram(lengths))["data"][0]["y"]).sum() == 2


def test_masking_figure_speaks_the_tokenizers_mask_and_segment_ids():
    """A BERT-pytorch vocabulary's figure says <mask> (escaped, so plotly shows it rather than reading a tag) and
    segments 1/2 in the decision row and the legend; the project's says [MASK] and 0/1."""
    from bertcore.data.bert_pytorch_vocab import BertPytorchTokenizer
    from bertcore.data.corpus import tutorial_corpus
    from bertcore.data.pretraining import masking_rule

    corpus = tutorial_corpus()
    tok = BertPytorchTokenizer.build(corpus.texts())
    a, b = corpus.pairs[0]
    ids, types = build_pair(tok, tok.encode(a), tok.encode(b), 20)
    rates = MaskingRates(0.9, 1.0, 0.0)
    masked, labels, decisions = mask_tokens(ids, tok, rates, torch.Generator().manual_seed(0))
    special = [i for i, t in enumerate(ids) if t in tok.special_ids]
    args = (tok.convert_ids_to_tokens(ids), ids, [t + 1 for t in types], decisions, tok.convert_ids_to_tokens(masked),
            masked, labels, special)
    seed_fig = spec(F.masking_figure(*args, rates=rates, first_segment=1, mask_token=tok.mask_token))
    decision_row = seed_fig["data"][0]["text"][4]
    n_masked = sum(1 for d in decisions if d.selected and d.action == "mask")
    assert n_masked >= 1 and decision_row.count("&lt;mask&gt;") == n_masked and "[MASK]" not in decision_row
    legend = [t["name"] for t in seed_fig["data"][1:]]
    assert "selected → &lt;mask&gt; (100%)" in legend  # the rates these decisions were drawn with
    assert "selected → random token (0%)" in legend and "selected → kept as is (0%)" in legend
    assert "segment A (id 1)" in legend and "segment B (id 2)" in legend
    plain = [t["name"] for t in spec(F.masking_figure(*args, rates=MaskingRates()))["data"][1:]]
    assert "selected → [MASK] (80%)" in plain and "segment A (id 0)" in plain
    assert "-> <mask>," in masking_rule(MaskingRates(), "<mask>") and "-> [MASK]," in masking_rule()
