"""The Train page (AppTest): live panel component args (only new rows), the probe editor, WordPiece uploads."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import TRAINING_RUNS as RUNS  # stopped after each test by conftest

from bertcore.launch.service import RunSpec
from explorer.launch import training_run

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def trained_run():
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer

    corpus = builtin_corpus(seed=0, n_pairs=600)
    tok = WordTokenizer.build(corpus.texts())
    bcfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    tcfg = TrainConfig(steps=30, batch_size=8, eval_every=10, eval_size=32, snapshot_every=10, max_seq_len=32)
    r = training_run.TrainingRun([RunSpec(bcfg, tcfg, corpus=corpus, tokenizer=tok, name="test")])
    RUNS.append(r)
    r.start()
    while r.running:
        r.snapshot()
        time.sleep(0.05)
    return r


def live_args(at) -> dict:
    els = [e for e in at.get("component_instance") if "livechart" in e.proto.component_name]
    assert len(els) == 1, "the Train page draws one live panel"
    return json.loads(els[0].proto.json_args)


def test_live_panel_carries_history_probe_and_baseline(trained_run):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["bx_run"] = trained_run
    at.run()
    at.switch_page("app_pages/train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    s = trained_run.snapshot()
    hist = s.histories[0].frame()
    args = live_args(at)
    assert args["train_start"] == 0 and len(args["train"]) == 30
    assert [r[1] for r in args["train"]] == pytest.approx(hist["mlm_loss"].tolist())
    ev = hist.dropna(subset=["eval_mlm_acc"])
    assert [r[0] for r in args["evals"]] == ev["step"].tolist() == [10, 20, 30]
    assert [r[3] for r in args["evals"]] == pytest.approx(ev["eval_mlm_acc"].tolist())
    assert args["baseline"] == pytest.approx(s.baselines[0]) and 0 < args["baseline"] < 1
    probe = s.probes[0]
    assert [r["step"] for r in probe] == [0, 10, 20, 30]
    assert [r[0] for r in args["probe"]] == [0, 10, 20, 30]
    assert args["probe"][-1][1] == [probe[-1]["top1"], pytest.approx(probe[-1]["p1"])]
    assert args["probe"][-1][4] == pytest.approx(probe[-1]["p_is_next"])
    # the next rerun sends only what the browser does not have yet: nothing
    at.run()
    again = live_args(at)
    assert again["train"] == [] and again["train_start"] == 30
    assert again["evals"] == [] and again["probe"] == [] and again["probe_start"] == 4


def test_bad_probe_blocks_start_with_a_message():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/train.py").run()
    text = next(t for t in at.text_input if t.label.startswith("sentence with one [MASK]"))
    assert text.value.count("[MASK]") == 1  # a default from the corpus
    assert not at.button(key="train_start").disabled
    text.set_value("the cat eats the cheese").run()
    assert at.button(key="train_start").disabled
    assert any("exactly one [MASK]" in e.value for e in at.error)


def test_uploaded_prose_trains_wordpiece_by_default():
    from streamlit.testing.v1 import AppTest

    from bertcore.data.corpus import load_corpus_file, suggested_vocab_size

    prose = " ".join(f"Sentence number {i} talks about topic {i % 7}, about the weather near the river in the "
                     "morning, and it ends right here." for i in range(400))
    corpus = load_corpus_file(prose.encode(), "prose.txt", mode="prose")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    # uploaded on the Data & tokens page, as a user does; the Train page then offers it
    at.switch_page("app_pages/data_tokens.py").run()
    at.radio(key="dt_source").set_value("upload a .txt file").run()
    at.radio(key="dt_mode").set_value("prose").run()
    at.file_uploader(key="dt_upload").set_value(("prose.txt", prose.encode(), "text/plain")).run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page("app_pages/train.py").run()
    assert "uploaded: prose.txt" in at.radio(key="train_corpus").options
    at.radio(key="train_corpus").set_value("uploaded: prose.txt").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="train_tok_kind").value == "wordpiece"
    size = next(n for n in at.number_input if n.label == "WordPiece vocabulary size")
    assert size.value == suggested_vocab_size(corpus)
    assert "[UNK]" not in " ".join(c.value for c in at.caption if "Not in the vocabulary" in c.value)
    # its pairs (two ~20-word sentences) are longer than SHORT_MAX_SEQ_LEN: the offered max length is shorter
    from bertcore.data.corpus import SHORT_MAX_SEQ_LEN

    T = next(s for s in at.slider if s.label == "max sequence length")
    assert T.value == SHORT_MAX_SEQ_LEN
    at.radio(key="train_corpus").set_value("built-in grammar").run()
    assert next(s for s in at.slider if s.label == "max sequence length").value == 48  # the preset's own


def test_a_chinese_upload_says_its_real_vocabulary_size():
    """WordPiece keeps every character: a Chinese file with 1,500 distinct characters gets more tokens than the
    vocabulary size offered (500), and the Train page says how many the model really gets."""
    from streamlit.testing.v1 import AppTest

    from bertcore.data.corpus import load_corpus_file
    from bertcore.data.corpus_defaults import corpus_defaults, default_tokenizer

    chars = [chr(0x4E00 + i) for i in range(1500)]
    sents = ["".join(chars[(7 * i + j) % 1500] for j in range(8)) + "。" for i in range(1200)]
    text = "\n\n".join("".join(sents[i:i + 4]) for i in range(0, 1200, 4))
    corpus = load_corpus_file(text.encode(), "chars.txt")
    d = corpus_defaults(corpus, user_file=True, tokenizer=False)
    real = default_tokenizer(corpus, d.tokenizer, d.vocab_size).vocab_size
    assert d.vocab_size == 500 < 1500 < real
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/data_tokens.py").run()
    at.radio(key="dt_source").set_value("upload a .txt file").run()
    at.file_uploader(key="dt_upload").set_value(("chars.txt", text.encode(), "text/plain")).run()
    at.switch_page("app_pages/train.py").run()
    at.radio(key="train_corpus").set_value("uploaded: chars.txt").run()
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.caption if "WordPiece keeps every character" in c.value]
    assert said and f"**{real:,}** tokens, not 500" in said[0], said


def test_d2l_preset_says_what_its_seed_does_and_keeps_its_switches():
    """Picking d2l shows what the seed's code does (frozen N(0, 1) positions, no embedding dropout) and the
    Start button would train exactly that config (the switches without a widget are kept)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/train.py").run()
    at.selectbox(key="train_preset").set_value("d2l").run()
    captions = " ".join(c.value for c in at.caption)
    assert "pos_embedding.data" in captions and "embedding_dropout=false" in captions
    assert "train_position_embeddings=False" in captions and "embedding_dropout=False" in captions
    assert "the published d2l package (1.0.3)" in captions and "train_position_embeddings=true gives" in captions
    assert "2 layers × 768, 4 heads, FFN 1024" in at.radio(key="train_size").help  # d2l's own size, from its preset
    at.selectbox(key="train_preset").set_value("BERT-pytorch (codertimo)").run()
    captions = " ".join(c.value for c in at.caption)
    assert "block_dropout=True" in captions and "TransformerBlock ends in a dropout" in captions
    assert "12 layers × 768, 12 heads, FFN 3072" in at.radio(key="train_size").help
    at.selectbox(key="train_preset").set_value("original BERT").run()
    captions = " ".join(c.value for c in at.caption)
    assert "pos_embedding.data" not in captions and "train_position_embeddings=True" in captions
    assert "block_dropout=False" in captions
    assert not at.exception


def test_an_uploaded_corpus_is_kept_in_the_workspace_across_reloads():
    """Upload on Data & tokens; a new session with the same ?ws= link (F5, a new tab, a restarted server) finds
    the same corpus on Data & tokens and on the Train page; another workspace does not."""
    from streamlit.testing.v1 import AppTest

    from bertcore.training import runs
    from explorer.session.corpus_state import UPLOAD_DIR

    text = "".join(f"the heron {i} waits by the reed.\tthe reed {i} bends in the wind.\n" for i in range(40))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    ws = at.query_params["ws"]
    ws = ws[0] if isinstance(ws, list) else ws
    at.switch_page("app_pages/data_tokens.py").run()
    at.radio(key="dt_source").set_value("upload a .txt file").run()
    at.file_uploader(key="dt_upload").set_value(("herons.txt", text.encode(), "text/plain")).run()
    assert not at.exception, [e.value for e in at.exception]
    first = at.session_state["bx_corpus_choice"]
    assert (runs.workspace_dir(ws, create=False) / UPLOAD_DIR / "corpus.txt").read_bytes() == text.encode()

    again = AppTest.from_file(APP, default_timeout=60)  # a reload: a new session, only the link is left
    again.query_params["ws"] = ws
    again.run()
    again.switch_page("app_pages/train.py").run()
    assert not again.exception, [e.value for e in again.exception]
    assert "uploaded: herons.txt" in again.radio(key="train_corpus").options
    again.switch_page("app_pages/data_tokens.py").run()
    again.radio(key="dt_source").set_value("upload a .txt file").run()
    assert not again.exception
    assert any("herons.txt" in c.value and "earlier in this workspace" in c.value for c in again.caption)
    kept = again.session_state["bx_corpus_choice"]
    assert kept.key == first.key and kept.corpus.pairs == first.corpus.pairs == [
        (f"the heron {i} waits by the reed.", f"the reed {i} bends in the wind.") for i in range(40)]

    other = AppTest.from_file(APP, default_timeout=60).run()  # another browser, no link: nothing of it
    other.switch_page("app_pages/train.py").run()
    assert not any(o.startswith("uploaded") for o in other.radio(key="train_corpus").options)
