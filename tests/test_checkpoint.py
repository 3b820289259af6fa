"""Checkpoints: save -> load gives identical outputs; hostile or inconsistent directories are refused."""
import json
import os
import pickle

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer
from bertcore.errors import CheckpointError
from bertcore.io.checkpoint import ModelBundle, load_checkpoint, save_checkpoint, untrained_bundle
from bertcore.model.bert import init_model
from bertcore.training.trainer import Trainer
from bertcore.analysis.records import TrainingRecords


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=300)


@pytest.fixture(scope="module")
def word_tok(corpus):
    return WordTokenizer.build(corpus.texts())


def tiny(vocab_size, **kw):
    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64, **kw)


def outputs(model, tok):
    ids = torch.tensor([[tok.cls_id] + tok.encode("the cat eats the fish .") + [tok.sep_id]
                        + tok.encode("then it sleeps .") + [tok.sep_id]])
    types = torch.zeros_like(ids)
    types[0, 8:] = 1
    model.eval()
    with torch.no_grad():
        out = model(ids, token_type_ids=types, output_attentions=True)
    return out.mlm_logits, out.nsp_logits, torch.stack(out.attentions)


def assert_same(b1, b2):
    for x, y in zip(outputs(b1.model, b1.tokenizer), outputs(b2.model, b2.tokenizer)):
        assert torch.equal(x, y)
    assert b1.tokenizer.vocab == b2.tokenizer.vocab


VARIANTS = [{}, {"position_embedding": "sinusoidal"}, {"norm_placement": "pre"}, {"mlm_head": "linear"},
            {"nsp_head": "first_token"}, {"hidden_act": "relu"}, {"hidden_act": "gelu_tanh", "layer_norm_eps": 1e-6}]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "bert")
def test_roundtrip_variants(tmp_path, word_tok, variant):
    model = init_model(tiny(word_tok.vocab_size, **variant), seed=1)
    b = ModelBundle(model=model, tokenizer=word_tok, name="m", source="test")
    save_checkpoint(b, tmp_path / "ck")
    b2 = load_checkpoint(tmp_path / "ck")
    assert b2.model.config == model.config
    assert_same(b, b2)
    names = set(load_file(str(tmp_path / "ck" / "model.safetensors")))
    assert names == set(b2.model.state_dict())  # the tied decoder is not a separate tensor
    assert b2.name == "m" and b2.source == "test" and not b2.model.training


def test_roundtrip_wordpiece(tmp_path, corpus):
    tok = WordPieceTokenizer.train(corpus.texts(), vocab_size=200)
    b = ModelBundle(model=init_model(tiny(tok.vocab_size), seed=2), tokenizer=tok)
    save_checkpoint(b, tmp_path / "wp")
    assert (tmp_path / "wp" / "tokenizer.json").is_file() and (tmp_path / "wp" / "vocab.txt").is_file()
    b2 = load_checkpoint(tmp_path / "wp")
    assert type(b2.tokenizer).__name__ == "WordPieceTokenizer"
    assert b2.tokenizer.tokenize("the zebras eat") == tok.tokenize("the zebras eat")
    assert_same(b, b2)


def test_roundtrip_trained_bundle_with_history_and_snapshots(tmp_path, corpus, word_tok):
    tc = TrainConfig(steps=6, batch_size=4, eval_every=3, eval_size=8, snapshot_every=3, max_seq_len=32)
    t = Trainer(tiny(word_tok.vocab_size), tc, corpus, tokenizer=word_tok)
    rec = TrainingRecords.attach(t)
    t.run()
    b = ModelBundle(model=t.model, tokenizer=t.tokenizer, history=t.history.frame(), name="run", snapshots=rec.snapshots,
                    probe_tokens=rec.probe_tokens, notes=["n1"], train_config=tc.to_dict())
    save_checkpoint(b, tmp_path / "tr")
    b2 = load_checkpoint(tmp_path / "tr")
    assert_same(b, b2)
    pd.testing.assert_frame_equal(b2.history, t.history.frame(), check_dtype=False)
    assert [s.step for s in b2.snapshots] == [s.step for s in rec.snapshots] == [0, 3, 6]
    for s1, s2 in zip(rec.snapshots, b2.snapshots):
        assert (s1.attentions == s2.attentions).all()
    assert b2.probe_tokens == rec.probe_tokens and b2.notes == ["n1"]
    assert TrainConfig.from_dict(b2.train_config) == tc
    cfg = json.loads((tmp_path / "tr" / "config.json").read_text())
    assert cfg["tokenizer_kind"] == "word" and "bertcore_version" in cfg


def test_missing_heads_flag_roundtrip(tmp_path, word_tok):
    model = init_model(tiny(word_tok.vocab_size), seed=0)
    model.has_mlm_head = False
    save_checkpoint(ModelBundle(model=model, tokenizer=word_tok), tmp_path / "h")
    b = load_checkpoint(tmp_path / "h")
    assert b.model.has_mlm_head is False and b.model.has_nsp_head is True


@pytest.fixture()
def good_dir(tmp_path, word_tok):
    d = tmp_path / "good"
    save_checkpoint(ModelBundle(model=init_model(tiny(word_tok.vocab_size), seed=0), tokenizer=word_tok), d)
    return d


def _edit_config(d, **kw):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(kw)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("remove,needle", [("config.json", "config.json"), ("model.safetensors", "model.safetensors"),
                                           ("vocab.txt", "vocab")])
def test_missing_files(good_dir, remove, needle):
    (good_dir / remove).unlink()
    with pytest.raises(CheckpointError, match=needle):
        load_checkpoint(good_dir)


def test_missing_dir_and_file_instead_of_dir(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "f")


def test_shape_mismatch_names_tensor(good_dir):
    _edit_config(good_dir, intermediate_size=48)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(good_dir)
    msg = str(e.value)
    assert "layer.0.intermediate.dense." in msg and "disagree" in msg
    assert ("[64]" in msg and "[48]" in msg) or ("[64, 32]" in msg and "[48, 32]" in msg)


def test_variant_mismatch_reports_keys(good_dir):
    _edit_config(good_dir, mlm_head="linear")
    with pytest.raises(CheckpointError, match="does not use|lacks"):
        load_checkpoint(good_dir)


def test_missing_and_extra_weights(good_dir):
    sd = load_file(str(good_dir / "model.safetensors"))
    sd.pop("cls.seq_relationship.weight")
    save_file(sd, str(good_dir / "model.safetensors"))
    with pytest.raises(CheckpointError, match="lacks 1 weight.*cls.seq_relationship.weight"):
        load_checkpoint(good_dir)
    sd["cls.seq_relationship.weight"] = torch.zeros(2, 32)
    sd["extra.weight"] = torch.zeros(3)
    save_file(sd, str(good_dir / "model.safetensors"))
    with pytest.raises(CheckpointError, match="extra.weight"):
        load_checkpoint(good_dir)


def test_vocab_size_and_invalid_config(good_dir):
    with open(good_dir / "vocab.txt", "a") as f:
        f.write("zzzextra\n")
    with pytest.raises(CheckpointError, match="vocab_size"):
        load_checkpoint(good_dir)


@pytest.mark.parametrize("cfg_text,needle", [('{"hidden_size": 30, "num_attention_heads": 4}', "divisible"),
                                             ('{"bogus_field": 1}', "bogus_field"), ("not json", "JSON"),
                                             ("[1, 2]", "JSON object")])
def test_bad_config(good_dir, cfg_text, needle):
    if cfg_text.startswith("{"):
        cfg = json.loads((good_dir / "config.json").read_text())
        cfg.update(json.loads(cfg_text))
        cfg_text = json.dumps(cfg)
    (good_dir / "config.json").write_text(cfg_text)
    with pytest.raises(CheckpointError, match=needle):
        load_checkpoint(good_dir)


def test_corrupt_safetensors(good_dir):
    (good_dir / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(good_dir)


class _Boom:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['BOOM_MARKER']}",))


def test_pickle_only_dir_is_never_loaded(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("BOOM_MARKER", str(marker))
    d = tmp_path / "pickled"
    d.mkdir()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(d)
    (d / "config.json").write_text(json.dumps(BertConfig().to_dict()))
    (d / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(CheckpointError, match="never loaded"):
        load_checkpoint(d)
    assert not marker.exists()


def test_hf_directory_points_to_import(good_dir):
    _edit_config(good_dir, model_type="bert", architectures=["BertForPreTraining"])
    cfg = json.loads((good_dir / "config.json").read_text())
    del cfg["bertcore_version"]
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="import-hf"):
        load_checkpoint(good_dir)


def test_untrained_bundle_is_seeded_and_leaves_global_rng(tmp_path):
    torch.manual_seed(5)
    state = torch.get_rng_state()
    a = untrained_bundle(seed=0, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    assert torch.equal(torch.get_rng_state(), state)
    b = untrained_bundle(seed=0, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    assert_same(a, b)
    assert a.model.config.vocab_size == a.tokenizer.vocab_size and a.history is None and not a.model.training


def test_resave_into_same_dir_leaves_no_stale_files(tmp_path, corpus, word_tok):
    wp = WordPieceTokenizer.train(corpus.texts(), vocab_size=200)
    hist = pd.DataFrame({"step": [1], "mlm_loss": [1.0]})
    save_checkpoint(ModelBundle(model=init_model(tiny(wp.vocab_size), 0), tokenizer=wp, history=hist), tmp_path / "d")
    save_checkpoint(ModelBundle(model=init_model(tiny(word_tok.vocab_size), 0), tokenizer=word_tok), tmp_path / "d")
    b = load_checkpoint(tmp_path / "d")
    assert type(b.tokenizer).__name__ == "WordTokenizer" and b.history is None
    assert not (tmp_path / "d" / "tokenizer.json").exists()
