"""The BERT-pytorch vocabulary (tokenizer "bert_pytorch") everywhere a page or the CLI names special tokens.

A model trained on the BERT-pytorch vocabulary reads ``<sos> A <eos> B <eos>`` and (codertimo preset) embeds
segment rows 1/2 with 0 for padding: the Overview, the formulas, Masking & NSP, Predict and ``bertcore inspect``
must say so; Data & tokens and Masking & NSP offer the vocabulary on any corpus; a bert_pytorch run fine-tunes and
classifies, also when saved under the kind's older name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from apptest_pages import open_page

from bertcore.data.bert_pytorch_vocab import BertPytorchTokenizer, bert_pytorch_example, word_vocab
from bertcore.data.corpus import tutorial_corpus

ROOT = Path(__file__).resolve().parents[1]
CODERTIMO = "BERT-pytorch (codertimo)"
SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


def _spec(corpus="tutorial", steps=3):
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.presets import preset
    from bertcore.launch.service import RunSpec

    b, t = preset(CODERTIMO, "paper")
    t = {**t, "steps": steps, "batch_size": 4, "warmup_steps": 1, "eval_every": steps, "eval_size": 8,
         "snapshot_every": 0}
    return RunSpec(BertConfig(**{**b, **SMALL}), TrainConfig(**t), corpus=corpus, tokenizer="bert_pytorch",
                   preset=CODERTIMO, probe=None)


@pytest.fixture(scope="module")
def bp_run(tmp_path_factory):
    """A codertimo run (small sizes, segment ids 1/2) trained a few steps on the tutorial corpus with the
    BERT-pytorch vocabulary."""
    from bertcore.launch import service

    return service.train(_spec(), tmp_path_factory.mktemp("bp") / "run")


@pytest.fixture(scope="module")
def bp_model(bp_run):
    from explorer.session.workspace import ActiveModel

    return ActiveModel(bp_run.bundle, "BERT-pytorch vocabulary model", "trained", True)


def _open(page: str, am=None):
    return open_page(page, am)


def _chart(at, key: str) -> dict:
    """The plotly figure drawn by st.plotly_chart(..., key=key)."""
    return next(json.loads(el.proto.spec) for el in at.get("plotly_chart") if el.proto.id.endswith("-" + key))


def _texts(at) -> str:
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


# ----------------------------------------------------------------------------- Overview (item 1)
def test_overview_draws_the_active_models_input_and_segments(bp_model):
    at = _open("app_pages/overview.py", bp_model)
    text = _texts(at)
    assert "`<sos> A <eos> B <eos>` (segment ids A=1, B=2, padding=0)" in text
    assert "[CLS] A [SEP] B [SEP]" not in text
    fig = _chart(at, "overview_pipeline")
    notes = " ".join(a["text"] for a in fig["layout"]["annotations"])
    assert "&lt;sos&gt; A &lt;eos&gt; B &lt;eos&gt; · segments A=1, B=2, padding=0" in notes  # escaped for plotly
    assert "from &lt;sos&gt;" in notes and "[CLS]" not in notes
    assert "LayerNorm" not in notes.split("Embeddings")[1].split("Encoder")[0]  # codertimo: no embedding LN
    latex = [x.value for x in at.latex]
    assert any(r"h_{\langle \mathrm{sos} \rangle}" in x for x in latex)
    assert not any(r"[\mathrm{CLS}]" in x for x in latex)


def test_overview_of_the_default_model_keeps_cls_sep():
    at = _open("app_pages/overview.py")
    assert "`[CLS] A [SEP] B [SEP]` (segment ids A=0, B=1)" in _texts(at)
    notes = " ".join(a["text"] for a in _chart(at, "overview_pipeline")["layout"]["annotations"])
    assert "[CLS] A [SEP] B [SEP] · segments A=0, B=1" in notes and "→ LayerNorm" in notes


def test_formulas_spell_the_first_token_as_the_vocabulary_does():
    from bertcore.config import BertConfig
    from bertcore.model.formulas import formulas

    bp = BertPytorchTokenizer.build(tutorial_corpus().texts())
    c = BertConfig()
    assert formulas(c, bp)["nsp"] == formulas(c)["nsp"].replace(r"[\mathrm{CLS}]", r"\langle \mathrm{sos} \rangle")
    assert formulas(c, bp)["nsp"] != formulas(c)["nsp"]


# ----------------------------------------------------------------------------- Data & tokens, Masking & NSP (item 2)
def test_data_tokens_offers_the_bert_pytorch_vocabulary_with_the_tutorials_ids():
    at = _open("app_pages/data_tokens.py")
    assert at.radio(key="dt_kind").options == ["word-level", "WordPiece", "BERT-pytorch"]
    at.radio(key="dt_source").set_value("tutorial two-liner").run()
    at.radio(key="dt_kind").set_value("BERT-pytorch").run()
    assert not at.exception, [e.value for e in at.exception]
    choice = at.session_state["bx_corpus_choice"]
    assert (choice.key, choice.kind) == ("tutorial", "bert_pytorch")
    vocab = next(d.value for d in at.dataframe if "count in corpus" in d.value)
    assert dict(zip(vocab["token"], vocab["id"])) == word_vocab(tutorial_corpus().pairs)
    assert "Ids 0–4 are the special tokens <pad> <unk> <eos> <sos> <mask>." in _texts(at)
    at.text_area(key="dt_text").set_value("Welcome to the jungle").run()
    cells = _chart(at, "dt_tokens_chart")["data"][0]["text"]
    ex = bert_pytorch_example()
    assert cells[1] == [str(i) for i in ex["a_ids"] + [ex["vocab"]["jungle"]]]  # tutorial 003's ids: 7 14 5 11
    assert [m.value for m in at.metric if m.label == "<unk> tokens"] == ["0"]


def test_masking_page_masks_sos_a_eos_b_eos_with_the_tutorials_ids():
    from bertcore.data.pretraining import build_pair
    from explorer.session.corpus_state import CorpusChoice

    at = _open("app_pages/masking_nsp.py")
    at.session_state["bx_corpus_choice"] = CorpusChoice(tutorial_corpus(), "tutorial", "bert_pytorch")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    fig = _chart(at, "mn_mask_chart")
    assert fig["layout"]["title"]["text"].startswith("&lt;sos&gt; A &lt;eos&gt; B &lt;eos&gt; with the masking")
    tokens, ids, segments = fig["data"][0]["text"][:3]
    vocab = word_vocab(tutorial_corpus().pairs)
    a, b = tutorial_corpus().pairs[0]
    want = [vocab["<sos>"], *[vocab[w] for w in a.split()], vocab["<eos>"], *[vocab[w] for w in b.split()],
            vocab["<eos>"]]
    assert ids == [str(i) for i in want] == [str(i) for i in [3, 7, 14, 5, 2, 5, 11, 2]]
    assert tokens[0] == "&lt;sos&gt;" and tokens[4] == "&lt;eos&gt;"
    assert segments == ["1"] * 5 + ["2"] * 3  # BERT-pytorch's labels, as the tutorial writes them
    tok = BertPytorchTokenizer.build(tutorial_corpus().texts())
    assert build_pair(tok, tok.encode(a), tok.encode(b), 48)[0] == want
    assert "→ <mask>" in _texts(at)


# ----------------------------------------------------------------------------- Predict (items 1, 5)
def test_predict_prefills_words_a_bert_pytorch_vocabulary_knows(bp_model):
    at = _open("app_pages/predict.py", bp_model)
    tok = bp_model.tokenizer
    text = at.text_area(key="pred_text").value
    assert "[MASK]" in text and tok.unknown_words(text.replace("[MASK]", " ")) == []
    a, b = at.text_area(key="pred_nsp_a").value, at.text_area(key="pred_nsp_b").value
    assert tok.unknown_words(a) == [] and tok.unknown_words(b) == []
    assert "(fed as <unk>)" not in _texts(at)  # the BERT-pytorch model's column (the untrained one is compared beside)
    assert "reads the <sos> vector of `<sos> A <eos> B <eos>`" in _texts(at)
    at.radio(key="pred_mode").set_value("Click words to mask them").run()
    assert tok.unknown_words(at.text_input(key="pred_sentence").value) == []


def test_attention_prefills_a_pair_the_bert_pytorch_vocabulary_knows(bp_model):
    at = _open("app_pages/attention.py", bp_model)
    tok = bp_model.tokenizer
    a, b = at.text_area(key="attn_a").value, at.text_area(key="attn_b").value
    assert tok.unknown_words(a) == [] and tok.unknown_words(b) == []
    assert at.toggle(key="attn_use_b").label == "Add a second sentence (pair: <sos> A <eos> B <eos>)"


def test_known_examples_keep_the_defaults_for_other_vocabularies():
    from bertcore.data.tokenization import WordTokenizer
    from explorer.parts.examples import Examples, known_examples

    defaults = Examples("the cows [MASK] the hay .", "The cow eats the hay.", "Ben reads a book.", "He walks.")
    word = WordTokenizer.build(tutorial_corpus().texts())  # knows almost none of the defaults, but is not bert_pytorch
    assert known_examples(word, defaults, [tutorial_corpus()]) == defaults
    bp = BertPytorchTokenizer.build(tutorial_corpus().texts())
    ex = known_examples(bp, defaults, [tutorial_corpus()])
    assert ex != defaults and (ex.a, ex.b) in tutorial_corpus().pairs
    assert bp.unknown_words(ex.masked.replace("[MASK]", " ")) == [] and "[MASK]" in ex.masked
    assert known_examples(bp, defaults, []) == defaults  # nothing better to offer


# ----------------------------------------------------------------------------- fine-tuning (item 3)
def test_a_bert_pytorch_run_fine_tunes_and_classifies(bp_run, tmp_path, monkeypatch):
    import math

    import bertcore.finetune.models as tokenization  # where load_classifier looks its tokenizer loader up
    from bertcore.data.tasks import Task, get_task
    from bertcore.finetune.models import classify, load_classifier, start_model
    from bertcore.finetune.route import save_finetune_run
    from bertcore.finetune.tuner import FinetuneConfig, FineTuner

    full = get_task("same_topic")
    task = Task(full.name, full.description, full.labels, full.pair, full.train, full.held_out[:16])
    model, tok, _ = start_model(str(bp_run.run_dir), task)
    assert tok.kind == "bert_pytorch" and model.config.segment_ids == "1/2"
    tuner = FineTuner(model, tok, task, FinetuneConfig(steps=3, batch_size=4, labels=8, eval_every=3))
    batch = tuner.train_data
    assert batch["input_ids"][0, 0] == tok.cls_id == 3  # <sos> A <eos> B <eos>, the tutorial's ids
    tuner.run()
    assert tuner.step_count == 3 and math.isfinite(tuner.history.frame()["loss"].iloc[-1])
    d = save_finetune_run(tmp_path / "ft", tuner, "test")
    kinds = []
    real = tokenization.load_tokenizer
    monkeypatch.setattr(tokenization, "load_tokenizer", lambda p, kind=None: kinds.append(kind) or real(p, kind))
    m2, tok2, _ = load_classifier(d)
    assert kinds == ["bert_pytorch"]  # the recorded kind is used, not guessed
    a, b = task.held_out[0].text_a, task.held_out[0].text_b
    p = classify(m2, tok2, a, b)
    assert len(p) == 2 and math.isclose(sum(p), 1.0, rel_tol=1e-6)
    assert p == pytest.approx(classify(model, tok, a, b), abs=1e-6)
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))  # a fine-tune saved before the rename:
    (d / "config.json").write_text(json.dumps({**cfg, "tokenizer_kind": "seed_word"}), encoding="utf-8")
    m3, tok3, _ = load_classifier(d)
    assert kinds[-1] == "bert_pytorch" and type(tok3) is type(tok2) and tok3.encode(a) == tok2.encode(a)
    assert classify(m3, tok3, a, b) == pytest.approx(p, abs=1e-6)


# ----------------------------------------------------------------------------- the inspect CLI (item 4)
def test_inspect_prints_the_segment_rows_a_1_2_model_embeds(bp_run, capsys):
    from bertcore.analysis.inference import inspect_pair
    from bertcore.cli import main

    r = inspect_pair(bp_run.bundle.model, bp_run.bundle.tokenizer, "Welcome to the", "the jungle")
    assert r.segment_ids == [0] * 5 + [1] * 3
    assert r.embedded_segment_ids == [1] * 5 + [2] * 3
    assert main(["inspect", str(bp_run.run_dir), "Welcome to the", "the jungle", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["embedded_segment_ids"] == [1] * 5 + [2] * 3 and out["segment_ids"] == [0] * 5 + [1] * 3
    assert main(["inspect", str(bp_run.run_dir), "Welcome to the", "the jungle"]) == 0
    text = capsys.readouterr().out
    assert "segment ids:1 1 1 1 1 2 2 2   (embedded rows: 1 = A, 2 = B, 0 = padding)" in text
    assert "<sos> Welcome to the <eos> the jungle <eos>" in text
