"""Sparse autoencoders (bertcore.analysis.sae, sae_data, features, steering, sae_runs; bertcore.io.sae_io): the
forward pass is SAELens's formula, training recovers a known dictionary, AUROC equals scikit-learn's, the grammar's
labels of a known pair, a tiny run's SAE in SAELens's layout, `features --text` recomputed in numpy from the weights
and `trace --json`, the SAELens round trip (when installed), steering through the Tap, and bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from sklearn.metrics import roc_auc_score

from bertcore.analysis import steering
from bertcore.analysis.features import average_ranks, label_scores
from bertcore.analysis.sae import SAETrainConfig, quality, train_sae
from bertcore.model.sae import SparseAutoencoder
from bertcore.analysis.sae_runs import SAESpec, features_of, open_sae, saes_over_training, train_run_sae
from bertcore.analysis.steering import Steered, random_direction, steer_text, steering_vector
from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import LabelledPair, builtin_corpus
from bertcore.data.token_labels import builtin_head, grammar_pairs, pair_word_facts
from bertcore.errors import BertcoreError, InputError
from bertcore.io.sae_io import CFG_FILE, WEIGHTS_FILE, load_sae
from bertcore.model.tap import Tap
from bertcore.launch import service

torch.set_num_threads(1)
SMALL = dict(n_train=300, n_eval=150, steps=60)


def _numpy_features(x: np.ndarray, w: dict, arch: str, k: int) -> np.ndarray:
    """SAELens's encode, written out: act((x − b_dec) W_enc + b_enc); top-k keeps the k largest, then ReLU."""
    pre = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
    if arch != "topk":
        return np.maximum(pre, 0)
    out = np.zeros_like(pre)
    idx = np.argsort(-pre, axis=-1, kind="stable")[..., :k]
    np.put_along_axis(out, idx, np.maximum(np.take_along_axis(pre, idx, -1), 0), -1)
    return out


# ----------------------------------------------------------------------------- the SAE itself
@pytest.mark.parametrize("arch", ["topk", "standard"])
def test_encode_is_saelens_formula(arch):
    g = torch.Generator().manual_seed(0)
    sae = SparseAutoencoder(6, 20, arch, k=3)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    x = torch.randn(50, 6, generator=g)
    with torch.no_grad():
        f = sae.encode(x)
        x_hat = sae(x)
    w = {n: getattr(sae, n).detach().numpy() for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    np.testing.assert_allclose(f.numpy(), _numpy_features(x.numpy(), w, arch, 3), atol=1e-5)
    np.testing.assert_allclose(x_hat.numpy(), f.numpy() @ w["W_dec"] + w["b_dec"], atol=1e-5)
    if arch == "topk":
        assert int((f > 0).sum(1).max()) <= 3


@pytest.mark.parametrize("arch", ["topk", "standard"])
def test_training_recovers_a_known_sparse_dictionary(arch):
    """x = 10 · (sparse code over 24 known unit directions in 12 dimensions): the SAE explains it and its decoder
    rows find the true directions; the input scale (10) is folded back, so the SAE reads the raw x."""
    g = torch.Generator().manual_seed(1)
    true = torch.randn(24, 12, generator=g)
    true /= true.norm(dim=1, keepdim=True)
    codes = torch.zeros(6000, 24)
    idx = torch.randint(0, 24, (6000, 2), generator=g)
    codes.scatter_(1, idx, torch.rand(6000, 2, generator=g) + 0.5)
    x = 10 * codes @ true + 3.0
    cfg = SAETrainConfig(d_in=12, d_sae=48, architecture=arch, k=2, l1=1.0, steps=500, batch_size=512, seed=0)
    sae, log = train_sae(x[:5000], cfg)
    q = quality(sae, x[5000:])
    assert q["variance_explained"] > (0.9 if arch == "topk" else 0.8), q
    cos = torch.nn.functional.normalize(sae.W_dec, dim=1) @ true.T  # (48, 24)
    assert float((cos.max(0).values > 0.9).float().mean()) >= 0.9  # (nearly) every true direction has a feature
    assert log["input_scale"] < 0.2  # trained on x / ~10, read back on x
    if arch == "topk":
        assert q["l0"] <= 2 + 1e-9
        np.testing.assert_allclose(sae.W_dec.norm(dim=1).numpy(), 1.0, atol=1e-5)


def test_training_is_seeded():
    x = torch.randn(3000, 8, generator=torch.Generator().manual_seed(2))
    cfg = SAETrainConfig(d_in=8, d_sae=32, k=4, steps=40, batch_size=256, seed=5)
    a, _ = train_sae(x, cfg)
    b, _ = train_sae(x, cfg)
    torch.testing.assert_close(a.W_enc, b.W_enc, rtol=0, atol=0)
    c, _ = train_sae(x, SAETrainConfig(**{**cfg.to_dict(), "seed": 6}))
    assert not torch.allclose(a.W_enc, c.W_enc)


def test_auroc_precision_recall_equal_sklearn_and_counts():
    rng = np.random.default_rng(0)
    f = np.where(rng.random((400, 5)) < 0.6, 0.0, rng.random((400, 5)))  # many tied zeros
    f[:, 4] = np.round(f[:, 4], 1)  # ties among non-zeros too
    m = rng.random((400, 3)) < 0.3
    m[:, 2] = f[:, 0] > 0.5  # a label the first feature predicts perfectly
    s = label_scores(f, m)
    for i in range(5):
        for j in range(3):
            assert s["auroc"][i, j] == pytest.approx(roc_auc_score(m[:, j], f[:, i]), abs=1e-12)
            fires = f[:, i] > 0
            assert s["precision"][i, j] == pytest.approx((fires & m[:, j]).sum() / fires.sum())
            assert s["recall"][i, j] == pytest.approx((fires & m[:, j]).sum() / m[:, j].sum())
    assert s["auroc"][0, 2] == 1.0
    np.testing.assert_array_equal(average_ranks(np.array([[0.0], [2.0], [0.0], [1.0]]))[:, 0], [1.5, 4, 1.5, 3])


# ----------------------------------------------------------------------------- the grammar's labels
def test_labels_of_a_known_pair():
    p = LabelledPair("farm", "animal", "pl", "n", "the muddy cows", "cow", "eat hay in the barn", "then", "they",
                     "are muddy", "The muddy cows eat hay in the barn.", "Then they are muddy.")
    wa, fa, wb, fb = pair_word_facts(p)
    assert wa == ["the", "muddy", "cows", "eat", "hay", "in", "the", "barn", "."]
    at = dict(zip(wa, fa))
    assert {"class:determiner", "number:subject_pl"} <= fa[0]
    assert {"class:adjective", "number:subject_pl", "topic_word:farm"} <= at["muddy"]
    assert {"class:noun", "number:subject_pl", "topic_word:farm"} <= at["cows"]
    assert {"class:verb", "number:verb_pl", "number:sentence_pl"} <= at["eat"]
    assert "number:subject_pl" not in at["hay"] and "class:preposition" in at["in"]
    assert wb == ["then", "they", "are", "muddy", "."]
    assert "class:connective" in fb[0] and {"class:pronoun", "number:subject_pl"} <= fb[1]
    assert {"class:verb", "number:verb_pl"} <= fb[2] and "class:punctuation" in fb[4]
    q = LabelledPair("kitchen", "person", "sg", "f", "Anna", "Anna", "eats soup", "", "she", "is hot",
                     "Anna eats soup.", "She is hot.")
    wa, fa, wb, fb = pair_word_facts(q)
    assert {"class:name", "gender:f", "number:subject_sg"} <= fa[0] and "number:verb_sg" in fa[1]
    assert {"class:pronoun", "gender:f"} <= fb[0]


def test_the_grammar_is_redrawn_exactly():
    corpus = builtin_corpus(seed=3, n_pairs=400)
    head = builtin_head(3, 400)
    assert head.pairs == corpus.pairs and head.name == corpus.name
    labelled = grammar_pairs(corpus)
    assert [(p.a, p.b) for p in labelled] == corpus.pairs
    corpus.pairs[7] = ("Something else.", "Entirely.")
    assert grammar_pairs(corpus) is None  # not what the grammar drew: no labels claimed


def test_an_uploaded_corpus_is_labelled_by_word_and_position():
    from bertcore.analysis.sae_data import token_set
    from bertcore.data.corpus import Corpus
    from bertcore.data.tokenization import WordTokenizer

    pairs = [("the cat sat on the mat .", "it slept ."), ("a dog ran in the park .", "it barked .")] * 3
    corpus = Corpus("my.txt", pairs)
    tok = WordTokenizer.build(corpus.texts())
    ts = token_set(corpus, tok, [0, 1], 32, seed=0)
    assert ts.grammar is False
    facts = ts.facts[0]
    assert facts[0] == {"sentence:A", "position:0", "special:[CLS]"}
    assert all(not any(f.startswith(("class:", "number:", "topic")) for f in fs) for fs in facts)
    words = [next((f for f in fs if f.startswith("word:")), None) for fs in facts]
    masked = {i for i, t in enumerate(ts.sequences[0]) if t == tok.mask_id}
    assert [w for i, w in enumerate(words) if i not in masked and w] == \
        [f"word:{t}" for i, t in enumerate(tok.convert_ids_to_tokens(ts.sequences[0])) if i not in masked
         and t not in ("[CLS]", "[SEP]")]


# ----------------------------------------------------------------------------- a tiny run
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 2-layer, 32-wide model trained 120 steps on the built-in grammar (saved steps 0, 40, 80, 120)."""
    tc = TrainConfig(steps=120, batch_size=64, eval_every=40, eval_size=64, snapshot_every=0, warmup_steps=10,
                     seed=0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=48)
    return service.train(service.RunSpec(cfg, tc, name="sae"), tmp_path_factory.mktemp("runs") / "sae").run_dir


@pytest.fixture(scope="module")
def sae_dir(run):
    return train_run_sae(run, SAESpec(layer=1, size=4, k=4, **SMALL))


def test_sae_folder_is_saelens_layout_with_quality(sae_dir, run):
    cfg = json.loads((sae_dir / CFG_FILE).read_text())
    assert sae_dir.parent == run / "saes" and sae_dir.name == "layer1-residual-x4-k4-seed0"
    assert cfg["architecture"] == "topk" and cfg["d_in"] == 32 and cfg["d_sae"] == 128 and cfg["k"] == 4
    assert cfg["metadata"]["hook_name"] == "layer.1.output" and cfg["apply_b_dec_to_input"] is True
    assert cfg["activation_fn_kwargs"] == {"k": 4} and cfg["normalize_activations"] == "none"
    w = load_file(str(sae_dir / WEIGHTS_FILE))
    assert {k: tuple(v.shape) for k, v in w.items()} == {"W_enc": (32, 128), "b_enc": (128,), "W_dec": (128, 32),
                                                         "b_dec": (32,)}
    t = json.loads((sae_dir / "training.json").read_text())
    q, losses = t["quality"], t["losses"]
    assert 0 < q["variance_explained"] <= 1 and q["l0"] <= 4 and 0 <= q["dead_fraction"] <= 1
    assert losses["clean_loss"] < losses["zero_loss"] and losses["spliced_loss"] < losses["zero_loss"]
    assert losses["loss_recovered"] == pytest.approx((losses["zero_loss"] - losses["spliced_loss"])
                                                     / (losses["zero_loss"] - losses["clean_loss"]), abs=1e-5)


def test_feature_table_names_features_and_is_complete(sae_dir):
    table = features_of(sae_dir)
    assert len(table["features"]) == 128 and table["grammar"] is True
    assert {"number:verb_pl", "special:[MASK]", "special:[CLS]", "sentence:B", "topic:farm"} <= set(table["labels"])
    live = [f for f in table["features"] if f["frequency"] > 0]
    assert live and all(f["auroc"] is not None for f in live)
    for f in live:
        assert (f["label"] is None) == (f["auroc"] < table["no_label_auroc"])
        acts = [c["activation"] for c in f["top_contexts"]]
        assert acts == sorted(acts, reverse=True) and acts[0] == pytest.approx(f["max_activation"], abs=1e-4)
        assert len(f["promotes"]) == 8 and f["promotes"][0][1] >= f["suppresses"][0][1]
        assert sum(f["histogram"]["counts"]) + f["histogram"]["zeros"] == table["n_tokens"]
    assert {"number", "topic", "mask"} == set(table["families"])


def _cli_json(capsys, *argv):
    """``python -m bertcore ARGV`` in-process: its exit status must be 0; its stdout parsed as JSON."""
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_features_text_activations_recomputed_in_numpy_from_weights_and_trace(sae_dir, run, capsys):
    text = "the muddy cows [MASK] hay in the barn ."
    got = _cli_json(capsys, "features", str(sae_dir), "--text", text, "--json")
    tr = _cli_json(capsys, "trace", str(run), text, "--layer", "1", "--json")
    assert got["tokens"] == tr["tokens"]
    x = np.array(tr["tensors"]["layer.1.output"]["values"], dtype=np.float64)
    w = {k: v.double().numpy() for k, v in load_file(str(sae_dir / WEIGHTS_FILE)).items()}
    ref = _numpy_features(x, w, "topk", 4)
    f = np.array(got["activations"])
    assert f.shape == (len(tr["tokens"]), 128)
    np.testing.assert_allclose(f, ref, atol=1e-4)
    listing = _cli_json(capsys, "features", str(sae_dir), "--top", "5", "--json")
    assert len(listing["features"]) == 5
    keys = {"id", "label", "auroc", "precision", "recall", "frequency", "top_contexts", "promotes", "suppresses"}
    assert keys <= set(listing["features"][0])
    one = _cli_json(capsys, "features", str(sae_dir), "--feature", "7", "--json")["features"]
    assert [f["id"] for f in one] == [7]


def test_cli_sae_trains_and_reports_the_fields_quality(run, capsys, tmp_path):
    out = _cli_json(capsys, "sae", str(run), "--layer", "0", "--size", "2", "--k", "3", "--train-steps", "20",
                    "--out", str(tmp_path / "s"), "--quiet", "--json")
    for key in ("variance_explained", "l0", "dead_fraction", "dense_fraction", "loss_recovered", "clean_loss",
                "spliced_loss", "zero_loss"):
        assert isinstance(out[key], float), key
    assert out["l0"] <= 3 and out["hook"] == "layer.0.output" and out["sae_dir"] == str(tmp_path / "s")
    assert json.loads((tmp_path / "s" / CFG_FILE).read_text())["d_sae"] == 64


def test_saelens_loads_the_saved_sae_with_the_same_activations(sae_dir, run, capsys):
    sae_lens = pytest.importorskip("sae_lens", reason="SAELens is not installed here (pip install sae-lens); the "
                                   "round trip is recorded in docs/BENCH.md from a run where it was")
    loaded = sae_lens.SAE.load_from_disk(str(sae_dir), device="cpu")
    tr = _cli_json(capsys, "trace", str(run), "the cow [MASK] muddy .", "--layer", "1", "--json")
    x = torch.tensor(tr["tensors"]["layer.1.output"]["values"])
    ours, _ = load_sae(sae_dir)
    np.testing.assert_allclose(loaded.encode(x).detach().numpy(), ours.encode(x).numpy(), atol=1e-5)
    np.testing.assert_allclose(loaded.decode(loaded.encode(x)).detach().numpy(), ours(x).numpy(), atol=1e-5)


def test_steering_goes_through_the_tap_and_equals_the_head_on_the_shifted_state(sae_dir, monkeypatch):
    """Layer 1 is the last layer of this post-LN model: the MLM logits read layer.1.output directly, so steering
    must give the head applied to (clean state + vector); and the model is called with a Tap that edits the site."""
    sae, cfg, training, b = open_sae(sae_dir)
    model, tok = b.model, b.tokenizer
    vec = steering_vector(sae, 3, 2.0, 1.5)
    assert torch.allclose(vec, 3.0 * sae.W_dec[3])
    seen = []
    forward = type(model).forward

    def spy(self, *a, **kw):
        seen.append(kw.get("tap"))
        return forward(self, *a, **kw)

    monkeypatch.setattr(type(model), "forward", spy)
    r = steer_text(model, tok, sae, "layer.1.output", 3, 2.0, 1.5, "the cow [MASK] muddy .", top_k=tok.vocab_size)
    assert len(seen) == 2 and all(isinstance(t, Tap) for t in seen)
    assert not seen[0].edit and set(seen[1].edit) == {"layer.1.output"}
    monkeypatch.setattr(type(model), "forward", forward)
    x = torch.tensor([[tok.cls_id, *tok.encode("the cow [MASK] muddy ."), tok.sep_id]])
    with torch.no_grad():
        model.eval()
        _, cache = model.run_with_cache(x, names=["layer.1.output"])
        pos = r["after"][0]["position"]
        want = torch.softmax(model.mlm_logits_from(cache["layer.1.output"][0, pos] + vec), -1)
    got = dict(r["after"][0]["top"])
    for t, p in zip(tok.convert_ids_to_tokens(list(range(tok.vocab_size))), want.tolist()):
        if t in got:
            assert got[t] == pytest.approx(p, abs=1e-5)


def test_random_direction_has_the_same_norm_and_is_seeded():
    v = torch.arange(10.0)
    a, b, c = random_direction(v, 1), random_direction(v, 1), random_direction(v, 2)
    assert float(a.norm()) == pytest.approx(float(v.norm()), rel=1e-6)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_skill_flips_use_random_directions_of_the_same_norm(sae_dir, monkeypatch):
    sae, cfg, training, b = open_sae(sae_dir)
    norms = []
    real = steering.random_direction

    def spy(like, seed):
        out = real(like, seed)
        norms.append((float(like.norm()), float(out.norm())))
        return out

    monkeypatch.setattr(steering, "random_direction", spy)
    suite = steering.skill_suite(builtin_corpus(), b.tokenizer, "verb_agreement", 48)
    vec = steering_vector(sae, 0, 2.0, 1.0)
    effect = torch.zeros(b.tokenizer.vocab_size)
    effect[b.tokenizer.encode("are")[0]] = 1.0  # a feature that favours "are"
    r = steering.skill_flips(b.model, suite, "layer.1.output", vec, effect)
    assert len(norms) == steering.RANDOM_DIRECTIONS and all(a == pytest.approx(o) for a, o in norms)
    assert r["items"] == len(suite.items) and 0 <= r["can_flip"] <= r["items"]
    assert 0 <= r["flip_rate"] <= 1 and 0 <= r["random_flip_rate"] <= 1
    assert all(e["before"] != e["favoured"] for e in r["examples"])
    with pytest.raises(InputError, match="MLM skill"):
        steering.skill_suite(builtin_corpus(), b.tokenizer, "nsp_other_topic", 48)


def test_a_steered_model_is_the_same_model_with_a_tap(sae_dir):
    sae, cfg, training, b = open_sae(sae_dir)
    x = torch.tensor([[b.tokenizer.cls_id, *b.tokenizer.encode("the cow is muddy ."), b.tokenizer.sep_id]])
    zero = torch.zeros(32)
    with torch.no_grad():
        b.model.eval()
        torch.testing.assert_close(Steered(b.model, "layer.1.output", zero)(x).mlm_logits, b.model(x).mlm_logits)


def test_saes_over_training_one_per_chosen_step(run):
    dirs = saes_over_training(run, SAESpec(layer=0, size=2, k=2, **SMALL), n=2)
    assert [json.loads((d / "training.json").read_text())["step"] for d in dirs] == [0, 120]
    for d in dirs:
        assert set(features_of(d)["families"]) == {"number", "topic", "mask"}


# ----------------------------------------------------------------------------- bad input
def test_bad_input_says_what_to_do(run, sae_dir, tmp_path, capsys, monkeypatch):
    assert main(["sae", str(run), "--layer", "5"]) == 2
    assert "layers 0..1" in capsys.readouterr().err
    monkeypatch.setenv("BERTCORE_MAX_SAE_MB", "1")
    assert main(["sae", str(run), "--layer", "0", "--size", "64"]) == 2
    err = capsys.readouterr().err
    assert "budget" in err and "BERTCORE_MAX_SAE_MB" in err
    monkeypatch.delenv("BERTCORE_MAX_SAE_MB")
    bad = tmp_path / "bad"
    bad.mkdir()
    assert main(["features", str(bad), "--json"]) == 2
    assert "not a usable SAE folder" in capsys.readouterr().err
    (bad / CFG_FILE).write_text("{not json")
    with pytest.raises(BertcoreError, match="not valid JSON"):
        load_sae(bad)
    cfg = json.loads((sae_dir / CFG_FILE).read_text())
    (bad / CFG_FILE).write_text(json.dumps({**cfg, "d_in": 33}))
    w = load_file(str(sae_dir / WEIGHTS_FILE))
    save_file(w, str(bad / WEIGHTS_FILE))
    with pytest.raises(BertcoreError, match="W_enc has shape"):
        load_sae(bad)
    assert main(["steer", str(run), str(sae_dir), "--feature", "0"]) == 2
    assert "--skill" in capsys.readouterr().err
    assert main(["steer", str(run), str(sae_dir), "--feature", "999", "the cow [MASK] ."]) == 2
    assert "features 0..127" in capsys.readouterr().err
    sae, cfg, training, b = open_sae(sae_dir)
    b.model.has_mlm_head = False
    with pytest.raises(InputError, match="no MLM head"):
        steer_text(b.model, b.tokenizer, sae, "layer.1.output", 0, 1.0, 1.0, "the cow [MASK] .")
