"""The live probe (bertcore.analysis.live_probe + TrainingRecords.probe_history): BERT §3.1 fill-mask and §3.2 P(IsNext)
asked at every evaluation, equal to what inference gives on the checkpoint of that step."""
import math

import pytest
import torch

from bertcore.analysis.inference import fill_mask, nsp_probability
from bertcore.analysis.live_probe import (
    PROBE_COLUMNS,
    Probe,
    check_probe,
    default_probe,
    read_probe_csv,
    run_probe,
    write_probe_csv,
)
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus, tutorial_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.io.checkpoint import ModelBundle, load_checkpoint, save_checkpoint
from bertcore.training.trainer import Trainer
from bertcore.analysis.records import TrainingRecords


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=600)


@pytest.fixture(scope="module")
def tok(corpus):
    return WordTokenizer.build(corpus.texts())


def small_cfg():
    return BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2)


def small_tc(**kw):
    base = dict(steps=24, batch_size=16, eval_every=8, eval_size=32, snapshot_every=0, warmup_steps=4,
                max_seq_len=32, lr=5e-3, num_threads=1)
    base.update(kw)
    return TrainConfig(**base)


def test_probe_rows_equal_inference_on_the_checkpoint_of_that_step(corpus, tok, tmp_path):
    probe = default_probe(corpus, tok)
    tr = Trainer(small_cfg(), small_tc(), corpus, tokenizer=tok)
    rec = TrainingRecords.attach(tr, probe)
    saved = {}

    def keep(ev):  # a checkpoint whenever the probe was asked at this step
        trainer = ev.trainer
        if rec.probe_history and rec.probe_history[-1]["step"] == trainer.step_count:
            d = tmp_path / f"step{trainer.step_count}"
            save_checkpoint(ModelBundle(model=trainer.model, tokenizer=trainer.tokenizer), d)
            saved[trainer.step_count] = d

    d0 = tmp_path / "step0"
    save_checkpoint(ModelBundle(model=tr.model, tokenizer=tr.tokenizer), d0)
    saved[0] = d0
    tr.callbacks.on("step", keep)
    tr.run()
    steps = [r["step"] for r in rec.probe_history]
    assert steps == [0, 8, 16, 24]
    assert sorted(saved) == steps
    for row in rec.probe_history:
        b = load_checkpoint(saved[row["step"]])
        fm = fill_mask(b.model, b.tokenizer, probe.text, top_k=3)
        cands = fm.masks[0].candidates
        assert [row["top1"], row["top2"], row["top3"]] == [t for t, _ in cands]
        assert [row["p1"], row["p2"], row["p3"]] == pytest.approx([p for _, p in cands], abs=1e-6)
        assert row["p1"] >= row["p2"] >= row["p3"]
        assert row["p_is_next"] == pytest.approx(nsp_probability(b.model, b.tokenizer, probe.a, probe.b), abs=1e-6)
    # the model changed, and so did what the probe saw
    assert rec.probe_history[0]["p1"] != rec.probe_history[-1]["p1"]


def test_probe_does_not_change_training(corpus, tok):
    """Asking the probe uses no training randomness: the loss curve is the same with and without it."""
    a = Trainer(small_cfg(), small_tc(steps=10, eval_every=5), corpus, tokenizer=tok)
    a.run()
    b = Trainer(small_cfg(), small_tc(steps=10, eval_every=5), corpus, tokenizer=tok)
    rec = TrainingRecords.attach(b)
    b.run()
    assert len(rec.probe_history) == 3
    assert a.history.frame()["mlm_loss"].tolist() == b.history.frame()["mlm_loss"].tolist()
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)


def test_default_probe_has_one_mask_and_a_true_pair(corpus, tok):
    p = default_probe(corpus, tok)
    assert p.text.count("[MASK]") == 1
    assert "[MASK]" in p.text and check_probe(p, tok) == []
    assert (p.a, p.b) in corpus.pairs
    assert p.text.replace("[MASK]", "eats") != p.text  # the built-in probe masks a verb
    t = tutorial_corpus()
    pt = default_probe(t)
    assert pt.text.count("[MASK]") == 1 and (pt.a, pt.b) in t.pairs


@pytest.mark.parametrize("probe, fix", [
    (Probe("the cat eats", "a", "b"), "exactly one [MASK]"),
    (Probe("[MASK] and [MASK]", "a", "b"), "exactly one [MASK]"),
    (Probe("the [MASK]", "  ", "b"), "sentence A of the pair is empty"),
    (Probe("the [MASK]", "a", ""), "sentence B of the pair is empty"),
    (Probe("x" * 600 + " [MASK]", "a", "b"), "under 500"),
])
def test_bad_probe_says_what_to_fix(probe, fix):
    with pytest.raises(InputError, match=fix.replace("[", r"\[").replace("]", r"\]")):
        check_probe(probe)


def test_unknown_words_are_reported(tok):
    assert check_probe(Probe("the zyzzyva [MASK] the cheese", "the cat eats.", "it eats qwrtz."), tok) == [
        "zyzzyva", "qwrtz"]


def test_probe_csv_round_trip(corpus, tok, tmp_path):
    from bertcore.model.bert import init_model

    model = init_model(small_cfg().replace(vocab_size=tok.vocab_size), seed=1)
    p = default_probe(corpus, tok)
    rows = [run_probe(model, tok, p, s) for s in (0, 50)]
    assert list(rows[0]) == PROBE_COLUMNS
    path = write_probe_csv(rows, tmp_path / "probe.csv")
    back = read_probe_csv(path)
    assert [r["step"] for r in back] == [0, 50]
    assert back[0]["top1"] == rows[0]["top1"]
    assert math.isclose(back[1]["p_is_next"], rows[1]["p_is_next"], rel_tol=1e-12)
    assert read_probe_csv(tmp_path / "missing.csv") == []
    (tmp_path / "bad.csv").write_text("step,p1\nnot-a-number,0.1\n")
    assert read_probe_csv(tmp_path / "bad.csv") == []
