"""Training on the BERT-pytorch tutorial's own vocabulary: its WordVocab (tutorials 000/003) as tokenizer kind
"bert_pytorch" (runs saved under the older name "seed_word" still load).

The vocabulary order is checked against an order written here from the tutorial's rule (torchtext: specials, then
words by frequency, ties alphabetical) and against tutorial 003's worked example; a codertimo run at paper size trains
on it by default, its batches read ``<sos> A <eos> B <eos>`` with the tutorial's ids, segments 1/2 and padding to
20, and the run reopens (load_tokenizer, fill-mask / nsp CLI with a typed [MASK], resume)."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from bertcore.data.bert_pytorch_vocab import SPECIALS, BertPytorchTokenizer, bert_pytorch_example, word_vocab
from bertcore.data.corpus import builtin_corpus, tutorial_corpus
from bertcore.data.tokenization import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CODERTIMO = "BERT-pytorch (codertimo)"
SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)  # a fast "paper" run


def _cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertcore", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _tutorial_order(pairs) -> list[str]:
    """The tutorial's WordVocab order, written from its rule: count whitespace words, sort by (-count, word)."""
    counts = Counter(w for a, b in pairs for s in (a, b) for w in s.split())
    return ["<pad>", "<unk>", "<eos>", "<sos>", "<mask>"] + sorted(counts, key=lambda w: (-counts[w], w))


# ----------------------------------------------------------------------------- the vocabulary
def test_vocabulary_order_and_ids_are_the_tutorials():
    corpus = tutorial_corpus()
    tok = BertPytorchTokenizer.build(corpus.texts())
    assert tok.kind == "bert_pytorch"
    assert tok.vocab == _tutorial_order(corpus.pairs)
    assert tok.token_to_id == word_vocab(corpus.pairs)
    assert tok.vocab[:5] == list(SPECIALS) == ["<pad>", "<unk>", "<eos>", "<sos>", "<mask>"]
    assert (tok.pad_id, tok.unk_id, tok.sep_id, tok.cls_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ex = bert_pytorch_example()
    assert tok.encode("Welcome to the") == ex["a_ids"] == [7, 14, 5]  # tutorial 003's ids
    assert tok.encode("the jungle") == ex["b_ids"] == [5, 11]
    big = builtin_corpus(seed=0, n_pairs=500)  # a corpus with punctuation and repeated words
    assert BertPytorchTokenizer.build(big.texts()).vocab == _tutorial_order(big.pairs)


def test_case_is_kept_and_words_split_on_whitespace_only():
    tok = BertPytorchTokenizer.build(["The cat sat .", "the cat, THE end."])
    assert {"The", "the", "THE", "cat", "cat,", "end.", "."} <= set(tok.vocab)
    assert len({tok.token_to_id[w] for w in ("The", "the", "THE")}) == 3
    assert tok.tokenize("The the Cat cat,") == ["The", "the", "<unk>", "cat,"]
    assert tok.unknown_words("The Cat dog") == ["Cat", "dog"]
    assert tok.encode("Cat") == [tok.unk_id] == [1]


def test_typed_specials_in_either_spelling_mean_the_tutorials_tokens():
    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    assert tok.tokenize("[MASK] to <mask> the[MASK] [CLS] [SEP] <sos> <eos> [PAD] [UNK]") == [
        "<mask>", "to", "<mask>", "the", "<mask>", "<sos>", "<eos>", "<sos>", "<eos>", "<pad>", "<unk>"]
    assert tok.encode("[MASK] jungle") == [4, 11]
    # a special typed in the corpus is not counted as a word (torchtext drops the specials from the counter)
    assert BertPytorchTokenizer.build(["a [MASK] <mask> b"]).vocab == list(SPECIALS) + ["a", "b"]


def test_save_and_load_keep_the_kind(tmp_path):
    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    tok.save(tmp_path)
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:6] == list(SPECIALS) + ["the"]
    for kind in ("bert_pytorch", None):  # by name, and recognised from the vocabulary's first five lines
        back = load_tokenizer(tmp_path, kind=kind)
        assert type(back) is BertPytorchTokenizer and back.vocab == tok.vocab and back.cls_id == 3


def test_canonical_special_and_display_helpers_read_the_tutorials_specials():
    from bertcore.data.tokenization import canonical_special
    from explorer.figures.attention_stats import head_stats_array
    from explorer.figures.learn import token_kinds

    assert [canonical_special(t) for t in ("<sos>", "<eos>", "<mask>", "<pad>", "<unk>", "the", "[CLS]")] == [
        "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "the", "[CLS]"]
    assert token_kinds(["<sos>", "<mask>", "<unk>", "jungle", "<eos>", "<pad>"]) == [
        "special", "special", "unk", "known", "special", "special"]
    tokens = ["<sos>", "Welcome", "<eos>", "<pad>"]
    A = np.full((1, 1, 4, 4), 0.25, dtype=np.float32)
    stats = head_stats_array(A, tokens)
    assert stats["to_cls"][0, 0] == pytest.approx(0.25) and stats["to_sep"][0, 0] == pytest.approx(0.25)


# ----------------------------------------------------------------------------- training on it
def _spec(tokenizer=None, steps=4, **train):
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.presets import preset, preset_tokenizer
    from bertcore.launch.service import RunSpec

    b, t = preset(CODERTIMO, "paper")
    t = {**t, "steps": steps, "batch_size": 4, "warmup_steps": 1, "eval_every": 2, "eval_size": 8,
         "snapshot_every": 0, **train}
    return RunSpec(BertConfig(**{**b, **SMALL}), TrainConfig(**t), corpus="tutorial",
                   tokenizer=tokenizer or preset_tokenizer(CODERTIMO, "paper"), preset=CODERTIMO)


def test_codertimo_paper_batches_read_sos_a_eos_b_eos_padded_to_20():
    from bertcore.presets import preset_tokenizer
    from bertcore.launch.service import prepare

    assert preset_tokenizer(CODERTIMO, "paper") == "bert_pytorch"
    assert preset_tokenizer(CODERTIMO, "tiny") == preset_tokenizer("original BERT", "paper") == "word"
    trainer, *_ = prepare(_spec())
    tok = trainer.tokenizer
    assert tok.kind == "bert_pytorch" and tok.vocab == _tutorial_order(tutorial_corpus().pairs)
    batch = trainer.data.sample_batch(8, torch.Generator().manual_seed(0))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == (8, 20)  # pad_to=20, as tutorial 003
    assert (ids[:, 0] == 3).all()  # <sos>
    seg = trainer.model.bert.embeddings.segment_ids(batch["token_type_ids"], mask)
    for row, s, m in zip(ids.tolist(), seg.tolist(), mask.tolist()):
        n = sum(m)
        assert row[n:] == [0] * (20 - n) and s[n:] == [0] * (20 - n) and m[:n] == [1] * n  # padding: id 0, seg 0
        eos = [i for i, t in enumerate(row) if t == 2]
        assert len(eos) == 2 and eos[1] == n - 1  # <sos> A <eos> B <eos>
        assert s[:eos[0] + 1] == [1] * (eos[0] + 1) and s[eos[0] + 1:n] == [2] * (n - eos[0] - 1)
        assert set(row[1:n]) - {2} <= set(range(4, tok.vocab_size))  # words (or <mask>), no [CLS]-like ids


def test_unknown_tokenizer_kind_is_refused_clearly(tmp_path):
    from bertcore.errors import ConfigError, TokenizerError
    from bertcore.launch.service import prepare

    with pytest.raises(ConfigError, match="tokenizer 'bpe' is unknown; use one of 'word', 'wordpiece', 'bert_pytorch'"):
        prepare(_spec(tokenizer="bpe"))
    BertPytorchTokenizer.build(["a b"]).save(tmp_path)
    with pytest.raises(TokenizerError, match="tokenizer kind 'bpe' is unknown"):
        load_tokenizer(tmp_path, kind="bpe")
    (tmp_path / "config.json").write_text(json.dumps({"tokenizer_kind": "bpe"}), encoding="utf-8")
    with pytest.raises(TokenizerError, match="names tokenizer_kind 'bpe'"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="starts with <pad> <unk> <eos> <sos> <mask>"):
        BertPytorchTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
    with pytest.raises(TokenizerError, match="no words"):
        BertPytorchTokenizer.build(["  ", "[MASK]"])
    r = _cli("train", "--tokenizer", "bpe", "--steps", "1")
    assert r.returncode == 2 and "error:" in r.stderr and "bert_pytorch" in r.stderr and "Traceback" not in r.stderr
    assert "seed_word" not in r.stderr  # the older name is read, never offered


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`bertcore train --preset codertimo --size paper` on the tutorial corpus (sizes made small), 3 steps."""
    out = tmp_path_factory.mktemp("bprun") / "run"
    sets = [a for k, v in {**SMALL, "batch_size": 4, "eval_every": 3, "snapshot_every": 0}.items()
            for a in ("--set", f"{k}={v}")]
    r = _cli("train", "--preset", CODERTIMO, "--size", "paper", "--corpus", "tutorial", "--steps", "3", "--quiet",
             "--out", str(out), *sets)
    assert r.returncode == 0, r.stderr
    return out


def test_cli_run_records_the_kind_and_reopens(cli_run):
    from bertcore.io.checkpoint import load_checkpoint

    assert json.loads((cli_run / "config.json").read_text())["tokenizer_kind"] == "bert_pytorch"
    assert json.loads((cli_run / "run.json").read_text())["tokenizer"] == "bert_pytorch"
    tok = load_tokenizer(cli_run)
    assert type(tok) is BertPytorchTokenizer and tok.token_to_id == word_vocab(tutorial_corpus().pairs)
    b = load_checkpoint(cli_run)
    assert type(b.tokenizer) is BertPytorchTokenizer and b.model.config.vocab_size == 15
    assert b.model.config.segment_ids == "1/2"


# ----------------------------------------------------------------------------- the kind's older name, "seed_word"
def test_a_run_saved_under_the_older_kind_name_loads_with_the_same_ids(cli_run, tmp_path):
    """Runs and checkpoints saved before the rename record "seed_word" (tokenization.LEGACY_KINDS): they load as a
    BertPytorchTokenizer that gives the same ids, whether the kind is recorded or given."""
    import shutil

    from bertcore.data.tokenization import LEGACY_KINDS, TOKENIZER_KINDS, canonical_kind
    from bertcore.io.checkpoint import load_checkpoint

    assert LEGACY_KINDS == {"seed_word": "bert_pytorch"} and set(LEGACY_KINDS.values()) <= set(TOKENIZER_KINDS)
    assert [canonical_kind(k) for k in ("seed_word", "bert_pytorch", "word", "bpe", None)] == [
        "bert_pytorch", "bert_pytorch", "word", "bpe", None]
    old = tmp_path / "old"
    shutil.copytree(cli_run, old)
    for name, key in (("config.json", "tokenizer_kind"), ("run.json", "tokenizer")):
        data = json.loads((old / name).read_text(encoding="utf-8"))
        assert data[key] == "bert_pytorch"  # written under today's name
        (old / name).write_text(json.dumps({**data, key: "seed_word"}), encoding="utf-8")
    text = "Welcome [MASK] the jungle here"
    want = load_tokenizer(cli_run).encode(text)
    for tok in (load_tokenizer(old), load_tokenizer(old, kind="seed_word"), load_checkpoint(old).tokenizer):
        assert type(tok) is BertPytorchTokenizer and tok.kind == "bert_pytorch" and tok.encode(text) == want


def test_the_cli_and_a_run_spec_read_the_older_kind_name(tmp_path):
    """``--tokenizer seed_word`` (not in the help) and a RunSpec JSON written before the rename (a kind name or a
    saved tokenizer's recorded kind) give today's kind."""
    from bertcore.cli import build_parser
    from bertcore.launch.service import RunSpec, prepare

    assert build_parser().parse_args(["train", "--tokenizer", "seed_word"]).tokenizer == "bert_pytorch"
    assert "seed_word" not in _cli("train", "--help").stdout
    e = _spec().to_json(tmp_path, 0)
    assert e["tokenizer"] == "bert_pytorch"
    trainer, *_ = prepare(RunSpec.from_json({**e, "tokenizer": "seed_word"}, tmp_path))
    assert type(trainer.tokenizer) is BertPytorchTokenizer
    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    e = _spec(tokenizer=tok).to_json(tmp_path, 1)
    assert e["tokenizer"]["kind"] == "bert_pytorch"
    back = RunSpec.from_json({**e, "tokenizer": {**e["tokenizer"], "kind": "seed_word"}}, tmp_path).tokenizer
    assert type(back) is BertPytorchTokenizer and back.vocab == tok.vocab


def test_fill_mask_and_nsp_cli_with_a_typed_mask(cli_run):
    for text in ("[MASK] to the", "<mask> to the"):
        r = _cli("fill-mask", str(cli_run), text, "--top-k", "15", "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["tokens"] == ["<sos>", "<mask>", "to", "the", "<eos>"]
        (m,) = out["masks"]
        cands = m["candidates"]
        assert m["position"] == 1 and len(cands) == 15
        assert {c["token"] for c in cands} == set(word_vocab(tutorial_corpus().pairs))  # the whole vocabulary
        probs = [c["prob"] for c in cands]
        assert sum(probs) == pytest.approx(1.0, abs=1e-4)
    r = _cli("nsp", str(cli_run), "Welcome to the", "the jungle", "--json")
    assert r.returncode == 0, r.stderr
    assert 0.0 < json.loads(r.stdout)["is_next"] < 1.0
    r = _cli("fill-mask", str(cli_run), "Welcome to the")
    assert r.returncode == 2 and r.stderr.startswith("error:") and "[MASK]" in r.stderr


def test_export_hf_refuses_the_bert_pytorch_vocabulary(tmp_path):
    from bertcore.config import BertConfig
    from bertcore.errors import ConfigError
    from bertcore.io.checkpoint import ModelBundle
    from bertcore.io.hf_interop import export_hf
    from bertcore.model.bert import BertForPreTraining

    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, **SMALL))  # an HF-exportable architecture
    with pytest.raises(ConfigError, match="BERT-pytorch vocabulary .* splits text on whitespace only"):
        export_hf(ModelBundle(model=model, tokenizer=tok), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()  # refused before anything was written


def test_resume_of_a_bert_pytorch_vocabulary_run(tmp_path):
    from bertcore.launch import service
    from bertcore.training.callbacks import Callbacks
    from bertcore.training.drive import StopSignal

    stop = StopSignal()
    spec = _spec()
    cb = Callbacks(step=lambda ev: stop.request("test stop") if ev.trainer.step_count >= 2 else None)
    first = service.train(spec, tmp_path / "run", stop=stop, callbacks=cb)
    assert first.status == "stopped" and first.trainer.step_count == 2
    resumed = service.resume(tmp_path / "run")
    assert resumed.status == "finished" and resumed.trainer.step_count == 4
    tok = resumed.trainer.tokenizer
    assert type(tok) is BertPytorchTokenizer and tok.vocab == first.trainer.tokenizer.vocab
    whole = service.train(_spec(), tmp_path / "whole")  # the same run without the stop
    np.testing.assert_allclose(resumed.trainer.history.frame()["mlm_loss"].to_numpy(),
                               whole.trainer.history.frame()["mlm_loss"].to_numpy(), rtol=1e-5)


# ----------------------------------------------------------------------------- the Train page
def test_train_page_offers_the_bert_pytorch_vocabulary_and_says_which_the_preset_uses():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/train.py").run()
    assert at.radio(key="train_tok_kind").options == ["word-level", "WordPiece", "BERT-pytorch"]
    at.radio(key="train_corpus").set_value("tutorial two-liner").run()
    at.selectbox(key="train_preset").set_value(CODERTIMO).run()
    at.radio(key="train_size").set_value("paper").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="train_tok_kind").value == "bert_pytorch"
    captions = " ".join(c.value for c in at.caption)
    assert (f"**{CODERTIMO}** at size **paper** trains with the **BERT-pytorch** vocabulary by default"
            in captions)
    assert "vocabulary: at paper size BERT-pytorch's own (tokenizer bert_pytorch" in captions  # PRESET_NOTES
    assert "Welcome [MASK] the" in [t.value for t in at.text_input]  # the live probe uses the tutorial's words
    at.radio(key="train_size").set_value("tiny").run()
    assert at.radio(key="train_tok_kind").value == "word"
    assert "at size **tiny** trains with the **word-level** vocabulary" in " ".join(c.value for c in at.caption)


# ----------------------------------------------------------------------------- pages with a BERT-pytorch model
@pytest.fixture(scope="module")
def bp_model():
    """A codertimo model (small sizes) trained a few steps on the tutorial corpus with the BERT-pytorch vocabulary."""
    from bertcore.io.checkpoint import ModelBundle
    from bertcore.launch.service import prepare
    from explorer.session.workspace import ActiveModel

    trainer, *_ = prepare(_spec(steps=3))
    trainer.run()
    trainer.model.eval()
    bundle = ModelBundle(model=trainer.model, tokenizer=trainer.tokenizer, history=trainer.history.frame(), name="bp",
                         source="test")
    return ActiveModel(bundle, "BERT-pytorch vocabulary model", "trained", True)


def _open(page: str, am):
    from streamlit.testing.v1 import AppTest

    from explorer.session import workspace

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state[workspace.MODELS_KEY] = {am.label: am}
    at.session_state[workspace.ACTIVE_KEY] = am.label
    at.switch_page(page).run()
    return at


def _charts(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def test_predict_page_fills_a_typed_mask_in_either_spelling(bp_model):
    from bertcore.analysis.inference import fill_mask

    at = _open("app_pages/predict.py", bp_model)
    for text in ("Welcome [MASK] the", "Welcome <mask> the"):
        at.text_area(key="pred_text").input(text).run()
        assert not at.exception, [e.value for e in at.exception]
        assert "has no [MASK]" not in " ".join(w.value for w in at.warning)
        titles = [(c["layout"].get("title") or {}).get("text", "") for c in _charts(at)]
        bars = [c for c, t in zip(_charts(at), titles) if t.startswith("[MASK] 1 (position 2)")]
        expected = fill_mask(bp_model.model, bp_model.tokenizer, text, top_k=5).masks[0].candidates
        assert bars and list(bars[0]["data"][0]["y"]) == [t for t, _ in expected]
    at.radio(key="pred_mode").set_value("Click words to mask them").run()
    at.text_input(key="pred_sentence").input("Welcome to the jungle.").run()
    pills = at.get("button_group")[0]
    assert [o.content for o in pills.proto.options] == ["Welcome", "to", "the", "jungle."]  # the tutorial's words


def test_attention_and_embeddings_pages_treat_sos_eos_as_cls_sep(bp_model):
    at = _open("app_pages/attention.py", bp_model)
    at.text_area(key="attn_a").input("Welcome to the").run()
    at.text_area(key="attn_b").input("the jungle").run()
    at.session_state["attn_tab"] = "Per-head statistics"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert table["to_cls"].notna().all() and table["to_sep"].notna().all()  # <sos> and <eos> found
    assert ((table["to_cls"] > 0) & (table["to_cls"] < 1)).all()
    assert any("puts on <sos>, on all <eos>s" in m.value for m in at.markdown)  # the caption in its spelling
    at = _open("app_pages/embeddings.py", bp_model)
    at.text_area(key="emb_text").input("Welcome to the\nthe jungle").run()
    at.selectbox(key="emb_color").set_value("special vs normal").run()
    traces = {t["name"]: list(t["text"]) for t in _charts(at)[1]["data"]}
    assert "<sos>" in traces["special"] and "<eos>" in traces["special"] and "<sos>" not in traces["normal"]
    assert at.toggle(key="emb_special").label == "<sos>/<eos>"
    at.toggle(key="emb_special").set_value(False).run()
    texts = [x for t in _charts(at)[1]["data"] for x in t["text"]]
    assert texts and "<sos>" not in texts and "<eos>" not in texts


def test_probe_accepts_the_tutorials_mask_spelling():
    from bertcore.analysis.live_probe import Probe, check_probe
    from bertcore.errors import InputError

    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    assert check_probe(Probe("Welcome <mask> the", "Welcome to the", "the jungle"), tok) == []
    assert check_probe(Probe("Welcome [MASK] Jungle", "I can stay", "here all night"), tok) == ["Jungle"]
    with pytest.raises(InputError, match="has 2 \\[MASK\\] tokens"):
        check_probe(Probe("<mask> <mask> the", "a", "b"), tok)
