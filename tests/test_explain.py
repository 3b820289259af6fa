"""Issue 13 in bertcore: attention rollout, gradient x input, integrated gradients, head ablation, and the
`explain` / `ablate` CLI commands (JSON fields, bad input -> `error: ...`, exit 2)."""
import json

import numpy as np
import pytest
import torch

from bertcore import cli
from bertcore.analysis import ablation as ab
from bertcore.analysis import explain as ex
from bertcore.errors import InputError

A_TEXT = "the careful kitten [MASK] under the sterile ward ."
B_TEXT = "the kitten eats my careful kibble ."


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained briefly on the built-in corpus, saved as a checkpoint directory."""
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.io.checkpoint import ModelBundle, save_checkpoint
    from bertcore.training.trainer import Trainer

    corpus = builtin_corpus(seed=0, n_pairs=400)
    tc = TrainConfig(steps=60, batch_size=32, lr=5e-3, eval_every=0, eval_size=32, max_seq_len=32, snapshot_every=0)
    tr = Trainer(BertConfig(vocab_size=100, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                            num_hidden_layers=2), tc, corpus)
    tr.run()
    model = tr.model.eval()
    out = tmp_path_factory.mktemp("explain") / "model"
    save_checkpoint(ModelBundle(model=model, tokenizer=tr.tokenizer, history=tr.history.frame(), name="t", source="test",
                                train_config=tc.to_dict()), out)
    return model, tr.tokenizer, out, corpus


def run_cli(capsys, *args):
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as e:  # argparse rejects an argument before the command runs
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_bad(code, err):
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err


# ----------------------------------------------------------------------------- rollout
def _rollout_by_hand(att):
    """Abnar & Zuidema 2020 written out term by term, independent of bertcore."""
    L, H, T, _ = att.shape
    result = np.eye(T)
    for layer in range(L):
        mixed = np.zeros((T, T))
        for h in range(H):
            mixed += att[layer, h] / H
        mixed = 0.5 * mixed + 0.5 * np.eye(T)
        for i in range(T):
            mixed[i] = mixed[i] / mixed[i].sum()
        result = np.matmul(mixed, result)
    return result


def test_cli_rollout_equals_rollout_of_inspect_attentions(trained, capsys):
    _, _, ckpt, _ = trained
    code, out, err = run_cli(capsys, "inspect", ckpt, A_TEXT, B_TEXT, "--json")
    assert code == 0, err
    insp = json.loads(out)
    att = np.array(insp["attentions"], dtype=np.float64)
    code, out, err = run_cli(capsys, "explain", ckpt, A_TEXT, B_TEXT, "--method", "rollout", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["tokens"] == insp["tokens"]
    got = np.array(r["rollout"])
    T = len(r["tokens"])
    assert got.shape == (T, T)
    np.testing.assert_allclose(got, _rollout_by_hand(att), atol=1e-5, rtol=0)
    np.testing.assert_allclose(got.sum(-1), np.ones(T), atol=1e-6)  # a product of row-stochastic matrices


def test_rollout_of_one_hot_heads_follows_the_chain():
    # layer 1 sends every token to token 0, layer 2 is the identity: Ā1 = 0.5 e0 + 0.5 I, Ā2 = I
    T = 3
    att = np.zeros((2, 1, T, T))
    att[0, 0, :, 0] = 1.0
    att[1, 0] = np.eye(T)
    R = ex.attention_rollout(att)
    want = 0.5 * np.eye(T)
    want[:, 0] += 0.5
    np.testing.assert_allclose(R, want, atol=1e-12)
    with pytest.raises(InputError):
        ex.attention_rollout(np.zeros((2, 3, 3)))


# ----------------------------------------------------------------------------- gradients
def test_forward_from_embeddings_equals_model_forward(trained):
    model, tok, _, _ = trained
    ids = torch.tensor([[tok.cls_id] + tok.encode(A_TEXT) + [tok.sep_id] + tok.encode(B_TEXT) + [tok.sep_id]])
    types = torch.zeros_like(ids)
    types[0, len(tok.encode(A_TEXT)) + 2:] = 1
    with torch.no_grad():
        out = model(ids, token_type_ids=types)
        h, nsp = ex.forward_from_word_embeddings(model, model.bert.embeddings.word_embeddings(ids), types)
        torch.testing.assert_close(model.mlm_logits_from(h), out.mlm_logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(nsp, out.nsp_logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("target", ["mask", "nsp"])
def test_integrated_gradients_complete_with_default_steps(trained, capsys, target):
    _, _, ckpt, _ = trained
    code, out, err = run_cli(capsys, "explain", ckpt, A_TEXT, B_TEXT, "--target", target, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["method"] == "integrated_gradients" and r["steps"] == ex.DEFAULT_IG_STEPS >= 50
    assert len(r["attributions"]) == len(r["tokens"])
    assert r["completeness_gap"] <= 0.05
    gap = abs(sum(r["attributions"]) - (r["f_input"] - r["f_baseline"])) / abs(r["f_input"] - r["f_baseline"])
    assert gap == pytest.approx(r["completeness_gap"], rel=1e-6, abs=1e-9)
    # the baseline keeps [CLS]/[SEP] (and, for the [MASK] baseline, the [MASK] itself): they get exactly 0
    for i, t in enumerate(r["tokens"]):
        if t in ("[CLS]", "[SEP]", "[MASK]"):
            assert r["attributions"][i] == 0.0
    assert r["target_label"] == ("IsNext" if target == "nsp" else r["target_label"])
    if target == "mask":
        assert r["tokens"][r["position"]] == "[MASK]"


def test_explained_value_is_the_models_log_probability(trained):
    from bertcore.analysis.inference import fill_mask, nsp_probability

    model, tok, _, _ = trained
    r = ex.explain(model, tok, A_TEXT, None, target="mask", method="grad_x_input")
    best, p = fill_mask(model, tok, A_TEXT, top_k=1).masks[0].candidates[0]
    assert r.target_label == best and r.f_input == pytest.approx(np.log(p), abs=1e-5)
    assert r.steps == 1 and r.baseline == "zero"
    n = ex.explain(model, tok, A_TEXT, B_TEXT, target="nsp", method="integrated_gradients")
    assert n.f_input == pytest.approx(np.log(nsp_probability(model, tok, A_TEXT, B_TEXT)), abs=1e-5)


def test_grad_x_input_is_gradient_times_embedding(trained):
    model, tok, _, _ = trained
    r = ex.explain(model, tok, A_TEXT, None, target="mask", method="grad_x_input")
    ids = torch.tensor([[tok.cls_id] + tok.encode(A_TEXT) + [tok.sep_id]])
    emb = model.bert.embeddings.word_embeddings(ids).detach().requires_grad_(True)
    h, _ = ex.forward_from_word_embeddings(model, emb, torch.zeros_like(ids))
    wid = tok.token_to_id[r.target_label]
    torch.log_softmax(model.mlm_logits_from(h[0, r.position]), -1)[wid].backward()
    np.testing.assert_allclose(r.attributions, (emb.grad[0] * emb[0]).sum(-1).detach().numpy(), atol=1e-6)


def test_attributions_are_deterministic_and_pick_the_ith_mask(trained):
    model, tok, _, _ = trained
    two = "the [MASK] kitten [MASK] under the ward ."
    r0 = ex.explain(model, tok, two, target="mask:0")
    r1 = ex.explain(model, tok, two, target="mask:1")
    assert (r0.position, r1.position) == (2, 4)
    np.testing.assert_array_equal(r0.attributions, ex.explain(model, tok, two, target="mask:0").attributions)


def test_explain_all_correlations(trained):
    model, tok, _, _ = trained
    r = ex.explain_all(model, tok, A_TEXT, B_TEXT, target="mask")
    T = len(r["tokens"])
    assert set(r["scores"]) == {"rollout", "grad_x_input", "integrated_gradients"}
    assert all(len(v) == T for v in r["scores"].values())
    assert len(r["rank_correlation"]) == 3
    assert all(-1.0 <= v <= 1.0 for v in r["rank_correlation"].values())
    assert ex.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert ex.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


@pytest.mark.parametrize("args,words", [
    (["the cat sat ."], "no [MASK]"),
    ([A_TEXT, "--target", "nsp"], "sentence B"),
    ([A_TEXT, "--target", "mask:3"], "mask:0"),
    ([A_TEXT, "--target", "verb"], "mask:i"),
    ([A_TEXT, "--steps", "10"], "--steps"),
    ([A_TEXT, "--method", "saliency"], "invalid choice"),
])
def test_explain_bad_input_exits_2(trained, capsys, args, words):
    _, _, ckpt, _ = trained
    code, _, err = run_cli(capsys, "explain", ckpt, *args)
    assert_bad(code, err)
    assert words in err


def test_cli_step_limits_match_the_library():
    from bertcore.cli import explain as cli_explain

    assert (cli_explain.DEFAULT_IG_STEPS, cli_explain.MIN_IG_STEPS, cli_explain.MAX_IG_STEPS) == (
        ex.DEFAULT_IG_STEPS, ex.MIN_IG_STEPS, ex.MAX_IG_STEPS)


# ----------------------------------------------------------------------------- head ablation
@pytest.fixture(scope="module")
def held_out(trained):
    model, tok, _, corpus = trained
    return ab.held_out_batches(tok, corpus, {"max_seq_len": 32}, n_examples=96)


def test_ablating_no_head_equals_the_baseline_exactly(trained, held_out):
    model = trained[0]
    base = ab.evaluate(model, held_out)
    assert ab.evaluate(model, held_out, torch.ones(2, 2)) == base
    r = ab.ablate(model, held_out, [])
    assert r["ablated"] == r["baseline"] == base and all(v == 0 for v in r["delta"].values())
    assert 0 < base["mlm_acc"] <= 1 and 0 <= base["nsp_acc"] <= 1 and base["mlm_loss"] > 0


def test_ablating_heads_changes_the_outputs(trained, held_out):
    model, tok, _, _ = trained
    imp = ab.head_importance(model, held_out)
    assert [(r["layer"], r["head"]) for r in imp["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["d_mlm_loss"] != 0 for r in imp["heads"])
    both = ab.ablate(model, held_out, [(0, 0), (0, 1)])
    assert both["delta"]["d_mlm_loss"] != 0
    # the mask reaches the attention: a switched-off head's probabilities are all 0 in output_attentions
    ids = torch.tensor([[tok.cls_id] + tok.encode("the kitten eats") + [tok.sep_id]])
    with torch.no_grad():
        out = model(ids, output_attentions=True, head_mask=ab.head_mask_for([(1, 0)], 2, 2))
    assert float(out.attentions[1][0, 0].abs().sum()) == 0.0 and float(out.attentions[1][0, 1].sum()) > 0


def test_cli_ablate_json_and_bad_heads(trained, capsys):
    _, _, ckpt, corpus = trained
    code, out, err = run_cli(capsys, "ablate", ckpt, "--heads", "0.1,1.0", "--examples", 64, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert set(r["baseline"]) == {"mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc"}
    assert [(h["layer"], h["head"]) for h in r["heads"]] == [(0, 1), (1, 0)]
    assert {"d_mlm_loss", "d_mlm_acc", "d_nsp_acc"} <= set(r["heads"][0])
    assert [(h["layer"], h["head"]) for h in r["together"]["heads"]] == [(0, 1), (1, 0)]
    for bad, words in (("2.0", "does not exist"), ("0-1", "LAYER.HEAD"), (",", "no heads")):
        code, _, err = run_cli(capsys, "ablate", ckpt, "--heads", bad)
        assert_bad(code, err)
        assert words in err


def test_predictions_with_heads_switched_off(trained):
    from bertcore.analysis.inference import fill_mask, nsp_probability, predict

    model, tok, _, _ = trained
    full = predict(model, tok, A_TEXT, B_TEXT, top_k=3)
    ref = fill_mask(model, tok, A_TEXT, top_k=3)  # same [MASK] row; the pair changes its context, so check A alone
    alone = predict(model, tok, A_TEXT, None, top_k=3)
    assert alone.p_is_next is None
    assert [t for t, _ in alone.masks[0].candidates] == [t for t, _ in ref.masks[0].candidates]
    assert alone.masks[0].candidates[0][1] == pytest.approx(ref.masks[0].candidates[0][1], abs=1e-6)
    assert full.p_is_next == pytest.approx(nsp_probability(model, tok, A_TEXT, B_TEXT), abs=1e-6)
    off = predict(model, tok, A_TEXT, B_TEXT, head_mask=torch.zeros(2, 2), top_k=3)
    assert off.p_is_next != pytest.approx(full.p_is_next, abs=1e-6)
    # the head mask is the forward's own: the same as transformers-style masking of the probabilities by hand
    one = torch.ones(2, 2)
    one[1, 0] = 0.0
    x = torch.tensor([tok.encode(A_TEXT)])
    with torch.no_grad():
        base = model(x, output_attentions=True, head_mask=one)
    assert float(base.attentions[1][0, 0].abs().max()) == 0.0 and float(base.attentions[1][0, 1].sum()) > 0
