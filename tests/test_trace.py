"""The glass box: `trace --json` against transformers' own tensors on an export-hf copy (original BERT), against the
seeds' formulas recomputed in numpy from the weights (codertimo, d2l), and the readable attention path against the
fast one."""
import json
import math

import numpy as np
import pytest
import torch
import transformers

from bertcore.analysis.inference import encode_pair
from bertcore.analysis.trace import trace
from bertcore.cli import main
from bertcore.config import BertConfig
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.io.checkpoint import ModelBundle, save_checkpoint
from bertcore.io.hf_interop import export_hf
from bertcore.model.bert import init_model
from bertcore.model.tap import Tap, tensor_names
from bertcore.presets import preset

torch.set_num_threads(1)
TEXTS = ["the cat sat on the mat .", "the dog ran in the park .", "a cow is hungry ."]
SENTENCE = "the cat sat on the mat"
PAIR = ("the cat sat .", "the dog ran in the park .")
LAYER_NAMES = ["query", "key", "value", "context", "scores", "scaled", "probs", "output", "residual"]


def _model(name, seed=3, **over):
    tok = WordTokenizer.build(TEXTS)
    cfg, _ = preset(name, "tiny")
    cfg = BertConfig(**{**cfg, "vocab_size": tok.vocab_size, "num_hidden_layers": 2, **over})
    return init_model(cfg, seed).eval(), tok


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """original BERT (random init, seed 3), its run folder, and transformers' model of its export-hf copy."""
    model, tok = _model("original BERT")
    bundle = ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")
    hf_dir = export_hf(bundle, tmp_path_factory.mktemp("hf") / "hf")
    hf = transformers.BertForPreTraining.from_pretrained(hf_dir, attn_implementation="eager").eval()
    run = tmp_path_factory.mktemp("run") / "ckpt"
    save_checkpoint(bundle, run)
    return model, tok, hf, run


def _cli_trace(capsys, run, *args):
    assert main(["trace", str(run), *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _hf_tensors(hf, ids, types, layer, mask=None):
    """transformers' own tensors: forward hooks on the embeddings' parts, the layer's Q/K/V linears, W^O, the
    attention block, the FFN's two linears and the layer, and output_attentions; heads split as (B, H, T, Dh)."""
    grabbed = {}
    emb, lay = hf.bert.embeddings, hf.bert.encoder.layer[layer]
    att = lay.attention

    def keep(name, pre=False):
        def hook(mod, args, out):
            grabbed[name] = (args[0] if pre else out[0] if isinstance(out, tuple) else out).detach()
        return hook

    mods = [(emb.word_embeddings, "embeddings.token"), (emb.position_embeddings, "embeddings.position"),
            (emb.token_type_embeddings, "embeddings.segment"), (emb, "embeddings.output"),
            (att.self.query, "q"), (att.self.key, "k"), (att.self.value, "v"), (att.self, "ctx"),
            (att.output.dense, "layer.attention.output"), (att, "layer.attention.residual"),
            (lay.intermediate.dense, "layer.ffn.pre_activation"), (lay.intermediate, "layer.ffn.intermediate"),
            (lay.output.dense, "layer.ffn.output"), (lay, "layer.output")]
    handles = [m.register_forward_hook(keep(n)) for m, n in mods]
    handles.append(emb.LayerNorm.register_forward_hook(lambda m, a, o: grabbed.__setitem__("embeddings.sum",
                                                                                            a[0].detach())))
    x = torch.tensor(ids)
    with torch.no_grad():
        out = hf(input_ids=x, token_type_ids=torch.tensor(types), attention_mask=mask, output_attentions=True)
    for h in handles:
        h.remove()
    H = hf.config.num_attention_heads
    B, T, D = grabbed["q"].shape

    def heads(t):
        return t.view(B, T, H, D // H).transpose(1, 2)

    p = f"layer.{layer}"
    res = {k.replace("layer.", f"{p}.", 1) if k.startswith("layer.") else k: v for k, v in grabbed.items()
           if k not in ("q", "k", "v", "ctx")}
    res[f"{p}.attention.query"], res[f"{p}.attention.key"] = heads(grabbed["q"]), heads(grabbed["k"])
    res[f"{p}.attention.value"], res[f"{p}.attention.context"] = heads(grabbed["v"]), heads(grabbed["ctx"])
    res[f"{p}.attention.scores"] = res[f"{p}.attention.query"] @ res[f"{p}.attention.key"].transpose(-1, -2)
    res[f"{p}.attention.scaled"] = res[f"{p}.attention.scores"] / math.sqrt(D // H)
    res[f"{p}.attention.probs"] = out.attentions[layer]
    res["embeddings.position"] = res["embeddings.position"].expand_as(res["embeddings.token"])
    return res


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("texts", [(SENTENCE,), PAIR])
def test_trace_json_equals_transformers(original, capsys, layer, texts):
    model, tok, hf, run = original
    got = _cli_trace(capsys, run, *texts, "--layer", str(layer))
    ids, types, _ = encode_pair(tok, texts[0], texts[1] if len(texts) > 1 else None)
    assert got["tokens"] == tok.convert_ids_to_tokens(ids)
    ref = _hf_tensors(hf, [ids], [types], layer)
    needed = ["embeddings.token", "embeddings.position", "embeddings.segment", "embeddings.sum", "embeddings.output"]
    needed += [f"layer.{layer}.attention.{n}" for n in LAYER_NAMES]
    needed += [f"layer.{layer}.ffn.intermediate", f"layer.{layer}.ffn.output", f"layer.{layer}.output"]
    for name in needed:
        ours = np.array(got["tensors"][name]["values"], dtype=np.float32)
        assert list(ours.shape) == got["tensors"][name]["shape"] == list(ref[name][0].shape), name
        np.testing.assert_allclose(ours, ref[name][0].numpy(), atol=1e-4, err_msg=name)
    assert np.allclose(np.array(got["tensors"][f"layer.{layer}.attention.probs"]["values"]).sum(-1), 1, atol=1e-5)


def test_padded_pair_batch_equals_transformers(original):
    """A batch of a sentence (padded) and a pair: every named tensor of both layers, and the masked scores."""
    model, tok, hf, _ = original
    a = encode_pair(tok, SENTENCE)[:2]
    b = encode_pair(tok, *PAIR)[:2]
    T = max(len(a[0]), len(b[0]))
    ids = [a[0] + [0] * (T - len(a[0])), b[0] + [0] * (T - len(b[0]))]
    types = [a[1] + [0] * (T - len(a[1])), b[1] + [0] * (T - len(b[1]))]
    mask = torch.tensor([[1] * len(a[0]) + [0] * (T - len(a[0])), [1] * len(b[0]) + [0] * (T - len(b[0]))])
    assert len(a[0]) < T
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor(ids), torch.tensor(types), mask)
    for layer in (0, 1):
        ref = _hf_tensors(hf, ids, types, layer, mask)
        for name, t in ref.items():
            np.testing.assert_allclose(cache[name].numpy(), t.numpy(), atol=1e-4, err_msg=name)
        masked = cache[f"layer.{layer}.attention.masked"][0, :, :, len(a[0]):]  # padded keys of the short row
        assert bool((masked < -1e30).all())
        assert float(cache[f"layer.{layer}.attention.probs"][0, :, :, len(a[0]):].abs().max()) == 0.0


def test_every_listed_name_is_computed_and_nothing_else(original):
    model, tok, _, _ = original
    x = torch.tensor([encode_pair(tok, SENTENCE)[0]])
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    assert sorted(cache) == sorted(n.name for n in tensor_names(model.config))


@pytest.mark.parametrize("name", ["original BERT", "BERT-pytorch (codertimo)", "blog BertModel",
                                  "Annotated Transformer", "d2l"])
def test_readable_path_equals_fast_path(name):
    """Reading (or editing) the attention switches to the formula path: same outputs to 1e-5, padded or not."""
    model, tok = _model(name)
    ids = torch.tensor([encode_pair(tok, *PAIR)[0]] * 2)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    with torch.no_grad():
        fast = model(ids, attention_mask=mask)
        read = model(ids, attention_mask=mask, tap=Tap("layer.*.attention.*"))
    torch.testing.assert_close(read.mlm_logits, fast.mlm_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(read.nsp_logits, fast.nsp_logits, atol=1e-5, rtol=0)


def test_an_edit_replaces_the_tensor_downstream():
    model, tok = _model("original BERT")
    ids = torch.tensor([encode_pair(tok, SENTENCE)[0]])
    with torch.no_grad():
        clean = model(ids)
        zero_head = Tap(["layer.1.attention.context"], edit={"layer.1.attention.context": lambda c: c * torch.tensor(
            [0.0, 1.0, 1.0, 1.0])[None, :, None, None]})
        edited = model(ids, tap=zero_head)
        hm = torch.ones(2, 4)
        hm[1, 0] = 0
        masked = model(ids, head_mask=hm)
    assert float(zero_head.cache["layer.1.attention.context"][0, 0].abs().max()) == 0.0
    torch.testing.assert_close(edited.mlm_logits, masked.mlm_logits, atol=1e-5, rtol=0)
    assert not torch.allclose(edited.mlm_logits, clean.mlm_logits, atol=1e-4)


# ----------------------------------------------------------------- the seeds' formulas, in numpy, from the weights
def _w(model):
    return {k: v.detach().double().numpy() for k, v in model.state_dict().items()}


def _lin(x, W, name):
    return x @ W[name + ".weight"].T + W[name + ".bias"]


def _softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _tutorial_ln(x, W, name, eps):
    """BERT-pytorch's LayerNorm (seed 000): a * (x - mean) / (std + eps) + b, std with n - 1."""
    return W[name + ".weight"] * (x - x.mean(-1, keepdims=True)) / (x.std(-1, ddof=1, keepdims=True) + eps) \
        + W[name + ".bias"]


def _nn_ln(x, W, name, eps):
    """nn.LayerNorm (d2l's AddNorm): (x - mean) / sqrt(var + eps) with the biased variance."""
    return W[name + ".weight"] * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) \
        + W[name + ".bias"]


def _attention(x, W, p, H):
    """seed 000's Attention.forward / d2l's DotProductAttention: softmax(Q Kᵀ / √d_k) V per head."""
    T, D = x.shape
    split = lambda t: t.reshape(T, H, D // H).transpose(1, 0, 2)  # noqa: E731
    q, k, v = (split(_lin(x, W, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 2, 1)
    scaled = scores / math.sqrt(D // H)
    probs = _softmax(scaled)
    ctx = probs @ v
    return dict(query=q, key=k, value=v, scores=scores, scaled=scaled, probs=probs, context=ctx,
                output=_lin(ctx.transpose(1, 0, 2).reshape(T, D), W, f"{p}.attention.output.dense"))


def _tutorial_pe(T, D):
    """The sinusoidal table as seeds 000/003 derive it: PE(pos, 2i) = sin(pos / 10000^(2i/D)), cos for 2i+1."""
    pos = np.arange(T)[:, None]
    div = np.exp(np.arange(0, D, 2) * -(math.log(10000.0) / D))
    pe = np.zeros((T, D))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * div), np.cos(pos * div)
    return pe


def _codertimo(W, ids, seg_labels, H, eps):
    """seed 000: BERTEmbedding (token + sinusoidal position + segment 1/2), then TransformerBlock with two pre-norm
    SublayerConnections x + sublayer(LN(x)), GELU (tanh form) in PositionwiseFeedForward."""
    tok = W["bert.embeddings.word_embeddings.weight"][ids]
    pos = _tutorial_pe(len(ids), tok.shape[1])
    seg = W["bert.embeddings.token_type_embeddings.weight"][seg_labels]
    out = {"embeddings.token": tok, "embeddings.position": pos, "embeddings.segment": seg,
           "embeddings.sum": tok + pos + seg, "embeddings.output": tok + pos + seg}
    x, p = out["embeddings.output"], "bert.encoder.layer.0"
    ln1 = _tutorial_ln(x, W, f"{p}.attention.output.LayerNorm", eps)
    a = _attention(ln1, W, p, H)
    res = x + a["output"]
    ln2 = _tutorial_ln(res, W, f"{p}.output.LayerNorm", eps)
    pre = _lin(ln2, W, f"{p}.intermediate.dense")
    gelu = 0.5 * pre * (1 + np.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre ** 3)))
    ffn = _lin(gelu, W, f"{p}.output.dense")
    out.update({f"layer.0.attention.{k}": v for k, v in a.items()})
    out.update({"layer.0.attention.ln_input": x, "layer.0.attention.ln_output": ln1, "layer.0.attention.residual": res,
                "layer.0.ffn.ln_input": res, "layer.0.ffn.ln_output": ln2, "layer.0.ffn.pre_activation": pre,
                "layer.0.ffn.intermediate": gelu, "layer.0.ffn.output": ffn, "layer.0.output": res + ffn})
    return out


def _d2l(W, ids, types, H, eps):
    """seed 004: BERTEncoder (token + segment + pos_embedding[:, :T]), EncoderBlock with AddNorm LN(X + Y) and a
    ReLU PositionWiseFFN."""
    tok = W["bert.embeddings.word_embeddings.weight"][ids]
    pos = W["bert.embeddings.position_embeddings.weight"][: len(ids)]
    seg = W["bert.embeddings.token_type_embeddings.weight"][types]
    out = {"embeddings.token": tok, "embeddings.position": pos, "embeddings.segment": seg,
           "embeddings.sum": tok + pos + seg, "embeddings.output": tok + pos + seg}
    x, p = out["embeddings.output"], "bert.encoder.layer.0"
    a = _attention(x, W, p, H)
    y = _nn_ln(x + a["output"], W, f"{p}.attention.output.LayerNorm", eps)
    pre = _lin(y, W, f"{p}.intermediate.dense")
    relu = np.maximum(pre, 0)
    ffn = _lin(relu, W, f"{p}.output.dense")
    out.update({f"layer.0.attention.{k}": v for k, v in a.items()})
    out.update({"layer.0.attention.ln_input": x + a["output"], "layer.0.attention.ln_output": y,
                "layer.0.attention.residual": y, "layer.0.ffn.pre_activation": pre, "layer.0.ffn.intermediate": relu,
                "layer.0.ffn.output": ffn, "layer.0.ffn.ln_input": y + ffn,
                "layer.0.output": _nn_ln(y + ffn, W, f"{p}.output.LayerNorm", eps)})
    out["layer.0.ffn.ln_output"] = out["layer.0.output"]
    return out


@pytest.mark.parametrize("name", ["BERT-pytorch (codertimo)", "d2l"])
def test_trace_equals_the_seed_formulas_in_numpy(name):
    model, tok = _model(name, seed=5)
    cfg = model.config
    r = trace(model, tok, *PAIR, layer=0)
    if name == "d2l":
        ref = _d2l(_w(model), r.input_ids, r.segment_ids, cfg.num_attention_heads, cfg.layer_norm_eps)
    else:
        labels = [t + 1 for t in r.segment_ids]  # seed 003: segment label 1 = A, 2 = B (0 = padding)
        assert r.embedded_segment_ids == labels
        ref = _codertimo(_w(model), r.input_ids, labels, cfg.num_attention_heads, cfg.layer_norm_eps)
    for key, v in ref.items():
        np.testing.assert_allclose(r.tensors[key], v, atol=1e-4, err_msg=key)
    assert set(ref) == {k for k in r.tensors if k.startswith(("embeddings.", "layer.0."))} - {
        "layer.0.attention.masked"}


def test_trace_refuses_bad_input(original, capsys):
    model, tok, _, run = original
    with pytest.raises(InputError, match="layers 0..1"):
        trace(model, tok, SENTENCE, layer=2)
    assert main(["trace", str(run), "   ", "--json"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["trace", str(run), SENTENCE, "--layer", "9"]) == 2
    assert "layers 0..1" in capsys.readouterr().err
