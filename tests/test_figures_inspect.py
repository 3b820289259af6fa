"""Unit tests for the Inspect pages' pure helpers: figures, per-head statistics, PCA, offline bertviz."""
import json
import math
import re

import numpy as np
import pytest

from explorer.figures import attention_stats as ast_
from explorer.figures import bertviz_offline
from explorer.figures import inspect as fi


def _decode(z):
    """plotly JSON arrays are either lists or {"dtype", "bdata", "shape"} typed arrays."""
    if isinstance(z, dict) and "bdata" in z:
        import base64

        arr = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        shape = z.get("shape")
        if shape:
            arr = arr.reshape([int(s) for s in str(shape).split(",")])
        return arr
    return np.asarray(z, dtype=np.float64)


def _rand_attn(L, H, T, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.random((L, H, T, T)).astype(np.float32)
    return A / A.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------- attention grid
def test_grid_z_values_equal_attention_arrays():
    L, H, T = 3, 4, 5
    A = _rand_attn(L, H, T)
    toks = ["[CLS]", "a", "b", "[SEP]", "c"]
    fig = fi.attention_grid_figure(A, toks, clickable=False)
    spec = json.loads(fig.to_json())
    heat = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert len(heat) == 1 and heat[0]["coloraxis"] == "coloraxis"  # one mosaic, one shared colour scale
    z = _decode(heat[0]["z"])
    for li in range(L):
        for h in range(H):
            np.testing.assert_allclose(fi.grid_tile(z, li, h, T), A[li, h], rtol=0, atol=1e-7)
    gap = fi.grid_gap(T)
    assert np.isnan(z[T:T + gap]).all() and np.isnan(z[:, T:T + gap]).all()  # empty cells between tiles
    assert spec["layout"]["meta"]["grid"] == {"layers": L, "heads": H, "cells": T, "gap": gap, "click_side": T}
    assert spec["layout"]["coloraxis"]["cmin"] == 0
    assert spec["layout"]["coloraxis"]["cmax"] == pytest.approx(float(A.max()))
    over = fig.data[1]
    assert over.hovertext[1] == "layer 1, head 1<br>query 0 [CLS]<br>key 1 a"  # hover labels carry the token
    assert "click" not in over.hovertemplate


def test_grid_repeated_tokens_get_unique_labels():
    labels = fi.token_labels(["the", "cat", "the"])
    assert len(set(labels)) == 3


def test_head_heatmap_and_stats_heatmap():
    A = _rand_attn(1, 1, 4)[0, 0]
    fig = fi.head_heatmap_figure(A, ["[CLS]", "x", "y", "[SEP]"], title="t")
    np.testing.assert_allclose(np.asarray(fig.data[0].z), A)
    df = ast_.head_stats(_rand_attn(2, 3, 4), ["[CLS]", "x", "y", "[SEP]"])
    f2 = fi.stats_heatmap_figure(df, "entropy")
    z = np.asarray(f2.data[0].z)
    assert z.shape == (2, 3)
    assert z[1, 2] == pytest.approx(df[(df.layer == 2) & (df["head"] == 3)]["entropy"].item(), rel=1e-6)


def test_head_heatmap_rejects_bad_shape():
    with pytest.raises(ValueError):
        fi.head_heatmap_figure(np.zeros((2, 3)), ["a", "b"])


# ----------------------------------------------------------------------------- statistics
def test_uniform_attention_has_entropy_log_t():
    T = 6
    A = np.full((1, 1, T, T), 1.0 / T)
    s = ast_.head_stats_array(A, ["[CLS]"] + ["w"] * (T - 2) + ["[SEP]"])
    assert s["entropy"][0, 0] == pytest.approx(math.log(T))
    assert s["to_cls"][0, 0] == pytest.approx(1.0 / T)
    assert s["to_sep"][0, 0] == pytest.approx(1.0 / T)
    assert s["to_self"][0, 0] == pytest.approx(1.0 / T)
    assert s["to_prev"][0, 0] == pytest.approx(1.0 / T)


def test_identity_attention_is_all_self():
    T = 5
    A = np.eye(T)[None, None]
    s = ast_.head_stats_array(A, ["[CLS]", "a", "b", "c", "[SEP]"])
    assert s["to_self"][0, 0] == pytest.approx(1.0)
    assert s["entropy"][0, 0] == pytest.approx(0.0)
    assert s["to_prev"][0, 0] == pytest.approx(0.0)
    assert s["to_next"][0, 0] == pytest.approx(0.0)
    assert s["to_cls"][0, 0] == pytest.approx(1.0 / T)  # only [CLS]'s own row looks at [CLS]


def test_previous_next_cls_and_sep_heads():
    T = 5
    toks = ["[CLS]", "a", "b", "[SEP]", "c"]
    prev = np.zeros((T, T))
    prev[0, 0] = 1.0
    for i in range(1, T):
        prev[i, i - 1] = 1.0
    nxt = np.zeros((T, T))
    nxt[T - 1, T - 1] = 1.0
    for i in range(T - 1):
        nxt[i, i + 1] = 1.0
    cls = np.zeros((T, T))
    cls[:, 0] = 1.0
    sep = np.zeros((T, T))
    sep[:, 3] = 1.0
    A = np.stack([prev, nxt, cls, sep])[None]  # [1, 4, T, T]
    df = ast_.head_stats(A, toks)
    assert list(df.columns) == ["layer", "head"] + ast_.STAT_COLUMNS
    assert df.loc[0, "to_prev"] == pytest.approx(1.0)
    assert df.loc[1, "to_next"] == pytest.approx(1.0)
    assert df.loc[2, "to_cls"] == pytest.approx(1.0)
    assert df.loc[3, "to_sep"] == pytest.approx(1.0)
    assert df.loc[2, "entropy"] == pytest.approx(0.0)
    assert (df["layer"] == 1).all() and list(df["head"]) == [1, 2, 3, 4]


def test_padding_rows_are_excluded():
    T = 4
    toks = ["[CLS]", "a", "[SEP]", "[PAD]"]
    A = np.zeros((1, 1, T, T))
    A[0, 0, :3, :3] = 1.0 / 3
    A[0, 0, 3] = [1, 0, 0, 0]  # garbage in the padded row must not count
    s = ast_.head_stats_array(A, toks)
    assert s["entropy"][0, 0] == pytest.approx(math.log(3))
    assert s["to_cls"][0, 0] == pytest.approx(1.0 / 3)


def test_entropy_zero_log_zero():
    assert ast_.row_entropy(np.array([1.0, 0.0, 0.0])) == pytest.approx(0.0)
    assert ast_.row_entropy(np.array([0.5, 0.5])) == pytest.approx(math.log(2))


def test_stats_without_special_tokens_are_nan():
    s = ast_.head_stats_array(np.full((1, 1, 1, 1), 1.0), ["x"])
    assert math.isnan(s["to_cls"][0, 0]) and math.isnan(s["to_prev"][0, 0])
    assert s["to_self"][0, 0] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- PCA
def test_pca_recovers_a_line():
    t = np.linspace(-3, 3, 50)
    X = np.stack([t, 2 * t, np.zeros_like(t)], axis=1) + 5.0
    coords, ratio = fi.pca(X, 2)
    assert ratio[0] == pytest.approx(1.0)
    assert ratio[1] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(np.abs(coords[:, 0]), np.abs(t) * math.sqrt(5), atol=1e-9)
    np.testing.assert_allclose(coords[:, 1], 0.0, atol=1e-9)


def test_pca_known_axes_and_sign_convention():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3)) * np.array([10.0, 3.0, 0.1])
    coords, ratio = fi.pca(X, 2)
    assert ratio[0] > ratio[1] > 0 and ratio.sum() < 1
    # the first component is (close to) the x axis, the second the y axis
    corr0 = np.corrcoef(coords[:, 0], X[:, 0])[0, 1]
    corr1 = np.corrcoef(coords[:, 1], X[:, 1])[0, 1]
    assert corr0 > 0.99 and corr1 > 0.99  # sign fixed: largest loading positive
    # coordinates are the centred data projected on orthonormal axes: distances are preserved in 2-D
    assert np.var(coords[:, 0]) == pytest.approx(np.var(X[:, 0]), rel=0.01)


def test_pca_small_inputs():
    coords, ratio = fi.pca(np.ones((3, 4)), 2)  # no variance at all
    assert np.allclose(coords, 0) and np.allclose(ratio, 0)
    coords, _ = fi.pca(np.array([[0.0, 1.0]]), 2)
    assert coords.shape == (1, 2)
    with pytest.raises(ValueError):
        fi.pca(np.zeros((0, 3)))


def test_embedding_scatter_groups():
    coords = np.array([[0, 0], [1, 1], [2, 2]], dtype=float)
    fig = fi.embedding_scatter_figure(coords, ["a", "b", "c"], ["g1", "g2", "g1"], np.array([0.5, 0.2]))
    assert [t.name for t in fig.data] == ["g1", "g2"]
    assert list(fig.data[0].text) == ["a", "c"]
    assert "50.0%" in fig.layout.xaxis.title.text


def test_fill_mask_and_nsp_figures():
    f = fi.fill_mask_figure([("eat", 0.7), ("eats", 0.2)], title="m")
    assert list(f.data[0].y) == ["eat", "eats"]
    np.testing.assert_allclose(np.asarray(f.data[0].x), [0.7, 0.2], rtol=1e-6)
    g = fi.nsp_figure(0.25)
    np.testing.assert_allclose(np.asarray(g.data[0].y), [0.25, 0.75])


# ----------------------------------------------------------------------------- offline bertviz
TOKENS = ["[CLS]", "zebrafoo", "eats", "[SEP]", "quuxbar", "[SEP]"]


def _check_offline(html: str):
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I), "external script tag left"
    low = html.lower()
    for marker in ("cdnjs", "cloudflare", "require.min.js", "unpkg", "jsdelivr"):
        assert marker not in low
    # bertviz's own part (after the inlined libraries) holds no URL at all
    assert not re.search(r"https?://", bertviz_offline.bertviz_part(html))
    assert not bertviz_offline.has_cdn_reference(html)
    # d3 v5 and jQuery are inlined, and the require shim is present
    assert "d3js.org" in html and "selectAll" in html  # d3 source
    assert "jQuery" in html and "jquery.org/license" in html.lower()  # jQuery source
    assert "window.requirejs = req" in html
    for t in TOKENS:
        assert json.dumps(t) in html


def test_head_view_is_offline():
    A = _rand_attn(2, 3, len(TOKENS))
    html = bertviz_offline.head_view_html(A, TOKENS, sentence_b_start=4)
    _check_offline(html)


def test_model_view_is_offline():
    A = _rand_attn(2, 3, len(TOKENS))
    html = bertviz_offline.model_view_html(A, TOKENS, sentence_b_start=None)
    _check_offline(html)


def test_make_offline_strips_stock_cdn_html():
    stock = ('<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>'
             "<div id='x'></div><script>require.config({ paths: { d3: 'https://cdnjs.cloudflare.com/d3',"
             " jquery: 'https://cdnjs.cloudflare.com/jq', } });\nrequirejs(['jquery','d3'], function($, d3) {"
             " var v = 0.123456789; });</script>")
    out = bertviz_offline.make_offline(stock)
    assert not bertviz_offline.has_cdn_reference(out)
    assert "requirejs(['jquery','d3']" in out
    assert "0.12345" in out and "0.123456789" not in out  # float trimming
    assert bertviz_offline.has_cdn_reference(stock)


# ----------------------------------------------------------------------------- issue 13: grid clicks, labels, export
def test_grid_overlay_carries_layer_head_query_key_weight():
    L, H, T = 2, 3, 4
    A = _rand_attn(L, H, T)
    toks = ["[CLS]", "a", "a", "[SEP]"]
    fig = fi.attention_grid_figure(A, toks)
    heat = [t for t in fig.data if t.type == "heatmap"]
    over = [t for t in fig.data if t.type == "scatter"]
    assert len(heat) == len(over) == 1
    cd = np.asarray(over[0].customdata)
    assert cd.shape == (L * H * T * T, 5)
    head = cd[(1 * H + 2) * T * T:(1 * H + 3) * T * T]  # points run head by head, layer-major
    assert set(head[:, 0]) == {1} and set(head[:, 1]) == {2}  # 0-based layer, head
    q, k = head[:, 2].astype(int), head[:, 3].astype(int)
    np.testing.assert_allclose(head[:, 4], A[1, 2][q, k], atol=1e-7)
    r, c = fi.grid_origin(1, 2, T)  # each marker sits on its cell of the mosaic
    block = slice((1 * H + 2) * T * T, (1 * H + 3) * T * T)
    np.testing.assert_array_equal(np.asarray(over[0].x)[block], c + k)
    np.testing.assert_array_equal(np.asarray(over[0].y)[block], r + q)
    assert over[0].marker.color == "rgba(0,0,0,0)" and over[0].marker.symbol == "square"
    assert "click to open this head" in over[0].hovertemplate and heat[0].hoverinfo == "skip"
    # layers and heads numbered from 1; token labels on the left of every layer row, the bottom of every column
    spec = json.loads(fig.to_json())["layout"]
    assert [a["text"] for a in spec["annotations"]] == ["H1", "H2", "H3", "L1", "L2"]
    step = T + fi.grid_gap(T)
    assert spec["xaxis"]["tickvals"] == [h * step + i for h in range(H) for i in range(T)]
    assert spec["xaxis"]["ticktext"] == fi.token_labels(toks) * H
    assert spec["yaxis"]["ticktext"] == fi.token_labels(toks) * L
    # a click selection (as st.plotly_chart returns it) names the head
    sel = {"selection": {"points": [{"curve_number": 1, "customdata": [1.0, 2.0, 0.0, 3.0, 0.2]}]}}
    assert fi.clicked_head(sel) == (1, 2)
    typed = {"selection": {"points": [{"customdata": {"0": 1.0, "1": 2.0, "2": 0.0, "3": 3.0, "4": 0.2}}]}}
    assert fi.clicked_head(typed) == (1, 2)  # how the browser sends a row of a float32 customdata array
    assert fi.clicked_head({"selection": {"points": []}}) is None and fi.clicked_head(None) is None


def test_grid_overlay_is_one_marker_per_block_on_long_inputs():
    """Past click_side cells a side, one marker per block (at its middle cell, with that cell's weight)."""
    L, H, T = 1, 2, 23
    A = _rand_attn(L, H, T)
    toks = [f"t{i}" for i in range(T)]
    fig = fi.attention_grid_figure(A, toks, click_side=8)
    over = fig.data[1]
    at = [1, 4, 7, 10, 13, 16, 19, 22]  # blocks of ceil(23 / 8) = 3 cells, middle cells (the last one clipped)
    cd = np.asarray(over.customdata)[len(at) ** 2:]  # head 2
    assert cd.shape == (len(at) ** 2, 5) and set(cd[:, 1]) == {1}
    assert sorted(set(cd[:, 2].astype(int))) == at == sorted(set(cd[:, 3].astype(int)))
    q, k = cd[:, 2].astype(int), cd[:, 3].astype(int)
    np.testing.assert_allclose(cd[:, 4], A[0, 1][q, k], atol=1e-7)
    small = fi.attention_grid_figure(A, toks, click_side=23).data[1]
    assert np.asarray(small.customdata).shape == (H * T * T, 5)  # short inputs keep one marker per cell
    assert over.marker.size == pytest.approx(3 * small.marker.size)


def test_labels_are_thinned_and_escaped():
    labels = fi.token_labels([f"w{i}" for i in range(100)])
    ticks = fi.thinned(labels, 20)
    assert len(ticks) <= 20 and ticks[0] == "0 w0" and set(ticks) <= set(labels)
    assert fi.token_labels(["<b>x</b>", "&"]) == ["0 &lt;b&gt;x&lt;/b&gt;", "1 &amp;"]
    assert fi.token_labels(["<b>"], escape=False) == ["0 <b>"]
    from explorer.figures.explain import token_strip_figure

    strip = token_strip_figure(["[CLS]", "<script>", "[SEP]"], {"rollout": [0.2, 0.5, 0.3]})
    assert all("<" not in x for x in strip.data[0].x)


def test_pooled_attention_keeps_rows_stochastic():
    A = _rand_attn(1, 2, 10)
    P, labels = fi.pooled_attention(A, [f"t{i}" for i in range(10)], 4)
    assert P.shape == (1, 2, 4, 4) and labels[0] == "0-2 t0" and labels[-1] == "9-9 t9"
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(P[0, 0, 0, 0], A[0, 0, :3, :3].sum(1).mean(), atol=1e-6)
    same, _ = fi.pooled_attention(A, [f"t{i}" for i in range(10)], 10)
    np.testing.assert_array_equal(same, A)


def test_top_attended_table():
    A = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    df = ast_.top_attended(A, ["[CLS]", "cat", "[SEP]"], k=3)
    assert list(df["key 1"]) == ["1 cat", "0 [CLS]", "2 [SEP]"]
    assert list(df["key 2"]) == ["2 [SEP]", "1 cat", "0 [CLS]"]  # ties keep the earlier key
    np.testing.assert_allclose(df["weight 1"], [0.6, 0.5, 1.0])


def test_exports_round_trip():
    import io

    import pandas as pd

    from explorer import export

    A = _rand_attn(2, 2, 3)
    toks = ["[CLS]", "a,b", "[SEP]"]
    df = pd.read_csv(io.BytesIO(export.attention_csv(A[1, 0], toks)))
    assert list(df.columns) == ["query", "0 [CLS]", "1 a,b", "2 [SEP]"]
    np.testing.assert_allclose(df.iloc[:, 1:].to_numpy(), A[1, 0], rtol=1e-5)
    z = np.load(io.BytesIO(export.attentions_npz(A, toks, [0, 0, 0])))
    np.testing.assert_array_equal(z["attentions"], A)
    assert list(z["tokens"]) == toks and list(z["segment_ids"]) == [0, 0, 0]
    att = pd.read_csv(io.BytesIO(export.attributions_csv(toks, {"ig": [0.1, -0.2, 0.0]})))
    assert list(att["ig"]) == [0.1, -0.2, 0.0] and list(att["token"]) == toks
    imp = pd.read_csv(io.BytesIO(export.importance_csv([{"layer": 0, "head": 1, "d_mlm_loss": 0.5}])))
    assert imp.to_dict("records") == [{"layer": 0, "head": 1, "d_mlm_loss": 0.5}]
    cfg = export.plotly_config("L1 H2 / attention", "png")
    assert cfg["toImageButtonOptions"] == {"format": "png", "filename": "L1_H2_attention", "scale": 2}
    assert export.plotly_config("x")["toImageButtonOptions"]["format"] == "svg"
    with pytest.raises(ValueError):
        export.plotly_config("x", "pdf")
