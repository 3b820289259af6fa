"""Issue 26, truth to the seeds in training: every dropout and every trainable tensor where the seed's code puts it.

In eval mode each preset already equals its seed (tests/test_tutorial_presets.py). Here the model trains: with an
all-keep dropout mask (each dropout computes x / (1 - p)) bertcore's train-mode outputs and gradients must equal
the seed's, written from its code in tests/tutorial_references.py (original BERT: transformers' BertForPreTraining),
with ``drop(x, place)`` scaling the same way. A dropout missing, added or moved changes the numbers (it scales
something else), so these tests see what eval mode cannot. With the real dropout rate each forward applies
as many dropouts, at the same places, as the seed's code.
"""
from __future__ import annotations

import re

import pytest
import tutorial_references as R
import torch
import torch.nn.functional as F
import transformers

from bertcore.config import BertConfig
from bertcore.presets import PRESETS, preset
from bertcore.model.bert import BertForPreTraining
from bertcore.model import functional as bertcore_functional
from bertcore.model.layers import Dropout

CODERTIMO = "BERT-pytorch (codertimo)"
V, T, B = 50, 16, 3
DIMS = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)

# The dropouts one forward of each seed's model applies: at the embeddings, then in every block (the order the
# forward meets them). Written from the seeds' code, not from bertcore:
SEED_DROPOUTS = {
    # HF modeling_bert: BertEmbeddings.dropout; eager attention's dropout on the weights; BertSelfOutput.dropout
    # before its LayerNorm; BertOutput.dropout before its LayerNorm; no dropout in the heads
    "original BERT": (["embeddings"], ["attention probs", "attention output", "FFN output"]),
    # bert-pytorch 0.0.1a4: BERTEmbedding.dropout; Attention(dropout=); both SublayerConnections;
    # PositionwiseFeedForward's dropout after the GELU; TransformerBlock's return self.dropout(x)
    CODERTIMO: (["embeddings"], ["attention probs", "attention output", "FFN inner", "FFN output", "block output"]),
    # seed 001 shows BertEmbedding's dropout; the rest is BERT's (assumed, as the preset notes say)
    "blog BertModel": (["embeddings"], ["attention probs", "attention output", "FFN output"]),
    # seed 002: PositionalEncoding's dropout; attention(..., dropout=self.dropout); two SublayerConnections;
    # PositionwiseFeedForward w_2(dropout(relu(w_1 x)))
    "Annotated Transformer": (["embeddings"], ["attention probs", "attention output", "FFN inner", "FFN output"]),
    # seed 004 / d2l: no dropout in BERTEncoder; DotProductAttention's dropout; AddNorm ln(dropout(Y) + X) twice
    "d2l": ([], ["attention probs", "attention output", "FFN output"]),
}

# bertcore's Dropout modules by place (the same names as HF's modules)
_MODULE_PLACES = {"attention.self.dropout": "attention probs", "attention.output.dropout": "attention output",
                  "intermediate.dropout": "FFN inner", "output.dropout": "FFN output", "dropout": "block output"}


def place_of(module_name: str) -> str:
    if module_name == "bert.embeddings.dropout":
        return "embeddings"
    return _MODULE_PLACES[re.fullmatch(r"bert\.encoder\.layer\.\d+\.(.+)", module_name).group(1)]


def _expected(name: str, layers: int) -> list[str]:
    emb, block = SEED_DROPOUTS[name]
    return emb + block * layers


def _rates(name: str) -> dict:
    """The seed's dropout rates (the seed size's: original BERT's tiny size has none)."""
    b = preset(name, "paper")[0]
    return {k: b[k] for k in ("hidden_dropout_prob", "attention_probs_dropout_prob")}


def _model(name: str, **kw) -> tuple[BertForPreTraining, dict]:
    extra = {"max_position_embeddings": T} if name == "blog BertModel" else {}  # the blog reads the whole table
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**{**PRESETS[name][0], **DIMS, **_rates(name), **extra, **kw}))
    with torch.no_grad():  # LayerNorm gains and biases away from 1 / 0, so a misplaced norm shows
        for k, p in m.named_parameters():
            if "LayerNorm" in k:
                p.add_(0.3 * torch.randn_like(p))
    return m, {k: v.detach().clone() for k, v in m.state_dict().items()}


def _batch():
    """[CLS]=2 first, lengths 16, 11, 7, A/B halves, 0 = padding; three MLM positions per sequence; NSP labels."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    lens = torch.tensor([T, 11, 7])
    real = torch.arange(T)[None, :] < lens[:, None]
    ids[:, 0] = 2
    ids[~real] = 0
    tt = ((torch.arange(T)[None, :] >= (lens // 2)[:, None]) & real).long()
    pred = torch.tensor([[1, 3, 5], [2, 4, 9], [1, 2, 6]])
    labels = torch.full_like(ids, -100)
    labels[torch.arange(B)[:, None], pred] = ids[torch.arange(B)[:, None], pred]
    return ids, tt, real.long(), lens, pred, labels, torch.tensor([0, 1, 0])


class KeepAll:
    """Every dropout keeps every element: x / (1 - p). Counts the applications (p > 0 in train mode)."""

    def __init__(self, hidden_p: float, attention_p: float):
        self.hidden_p, self.attention_p = hidden_p, attention_p
        self.places: list[str] = []

    def reference(self, x, place):  # the seed's nn.Dropout at ``place``
        p = self.attention_p if place == "attention probs" else self.hidden_p
        if p > 0:
            self.places.append(place)
        return x / (1 - p) if p > 0 else x

    @staticmethod
    def keep_mask(x, p, gen):  # bertcore.model.functional's mask, all ones, scaled by 1 / (1 - p)
        return torch.full_like(x, 1.0 / (1.0 - p))


def _hook_places(model) -> list[tuple[str, tuple]]:
    """Record (place, input shape) of every dropout bertcore applies (a Dropout module in train mode, p > 0)."""
    seen: list[tuple[str, tuple]] = []
    for name, mod in model.named_modules():
        if isinstance(mod, Dropout):
            def hook(mod, args, name=name):
                if mod.training and mod.p > 0:
                    seen.append((place_of(name), tuple(args[0].shape)))
            mod.register_forward_pre_hook(hook)
    return seen


def _reference(name, W, ids, tt, am, lens, pred, drop):
    """The seed's forward (dict of mlm, nsp, attentions, hidden) on bertcore's weights ``W``."""
    if name == CODERTIMO:
        seg = torch.where(am.bool(), tt + 1, torch.zeros_like(tt))  # seed 003's segment labels, 0 at padding
        return R.bert_pytorch_lm(R.to_bert_pytorch(W), ids, seg, heads=4, drop=drop)
    if name == "blog BertModel":
        return R.blog_model(W, ids, tt, heads=4, drop=drop)
    if name == "Annotated Transformer":
        return R.annotated_encoder(W, ids, heads=4, drop=drop)
    if name == "d2l":
        return R.d2l_model(W, ids, tt, lens, pred, heads=4, drop=drop)
    return _hf(W, ids, tt, am)  # transformers' dropout is torch's F.dropout, replaced by the caller


def _hf(W, ids, tt, am):
    """transformers' BertForPreTraining (eager attention) on the same weights, in train mode."""
    hc = transformers.BertConfig(**{k: v for k, v in DIMS.items()}, max_position_embeddings=64,
                                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                 layer_norm_eps=1e-12, attn_implementation="eager")
    hf = transformers.BertForPreTraining(hc)
    missing, unexpected = hf.load_state_dict({k: v.clone() for k, v in W.items()}, strict=False)
    assert not unexpected and all(k.startswith("cls.predictions.decoder") for k in missing)
    hf.tie_weights()
    hf.train()
    out = hf(input_ids=ids, token_type_ids=tt, attention_mask=am, output_attentions=True, output_hidden_states=True)
    # eager attention returns the weights after its dropout: undo the keep-all scale to compare probabilities
    scale = 1 - hc.attention_probs_dropout_prob
    return dict(mlm=out.prediction_logits, nsp=out.seq_relationship_logits, hidden=list(out.hidden_states),
                attentions=[a * scale for a in out.attentions], model=hf)


def _keep_all_everywhere(monkeypatch, keep: KeepAll):
    """bertcore's dropout mask and torch's F.dropout (what transformers calls) both keep every element."""
    monkeypatch.setattr(bertcore_functional, "_keep_mask", KeepAll.keep_mask)

    def dropout(x, p=0.5, training=True, inplace=False):
        if training and p > 0:
            keep.places.append(tuple(x.shape))
            return x / (1 - p)
        return x
    monkeypatch.setattr(F, "dropout", dropout)


@pytest.mark.parametrize("name", list(PRESETS))
def test_train_mode_with_an_all_keep_mask_equals_the_seed(name, monkeypatch):
    """Outputs, hidden states and attention probabilities in train mode equal the seed's to 1e-5, and the dropouts
    sit at the seed's places, in the seed's order, on tensors of the seed's shapes."""
    m, W = _model(name)
    ids, tt, am, lens, pred, labels, _ = _batch()
    rates = _rates(name)
    keep = KeepAll(rates["hidden_dropout_prob"], rates["attention_probs_dropout_prob"])
    _keep_all_everywhere(monkeypatch, keep)
    places = _hook_places(m)
    m.train()
    m.set_dropout_generator(torch.Generator().manual_seed(0))  # the trainer's path: every mask from the generator
    kw = dict(mlm_labels=labels) if name == "d2l" else {}  # d2l's MaskLM reads only pred_positions
    ours = m(ids, tt, am, output_attentions=True, output_hidden_states=True, **kw)
    ref = _reference(name, W, ids, tt, am, lens, pred, keep.reference)
    mlm, nsp = ours.mlm_logits, ours.nsp_logits
    if name in (CODERTIMO, "Annotated Transformer"):  # the seed's heads end in LogSoftmax
        mlm, nsp = mlm.log_softmax(-1), nsp.log_softmax(-1)
    torch.testing.assert_close(mlm, ref["mlm"], atol=1e-5, rtol=0)
    torch.testing.assert_close(nsp, ref["nsp"], atol=1e-5, rtol=0)
    assert len(ours.hidden_states) == len(ref["hidden"]) == 3
    for a, b in zip(ours.hidden_states, ref["hidden"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for a, b in zip(ours.attentions, ref["attentions"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)

    expected = _expected(name, 2)
    assert [p for p, _ in places] == expected
    D, H, Fs = DIMS["hidden_size"], DIMS["num_attention_heads"], DIMS["intermediate_size"]
    shape = {"embeddings": (B, T, D), "attention probs": (B, H, T, T), "attention output": (B, T, D),
             "FFN inner": (B, T, Fs), "FFN output": (B, T, D), "block output": (B, T, D)}
    assert [s for _, s in places] == [shape[p] for p in expected]
    if name == "original BERT":  # transformers' own dropout calls: the same shapes in the same order
        assert keep.places == [shape[p] for p in expected]
    else:
        assert keep.places == expected


def _grads(model) -> dict:
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", list(PRESETS))
def test_one_training_step_trains_what_the_seed_trains(name, monkeypatch):
    """One MLM + NSP step in train mode (the trainer's path: the last layer only at [CLS] and the masked rows): every
    gradient equals the seed's (all-keep dropout mask), the same tensors train, and the rows the seed never
    trains stay put (d2l's pos_embedding.data, BERT-pytorch's padding_idx rows)."""
    m, W = _model(name)
    ids, tt, am, lens, pred, labels, nsp_labels = _batch()
    rates = _rates(name)
    keep = KeepAll(rates["hidden_dropout_prob"], rates["attention_probs_dropout_prob"])
    _keep_all_everywhere(monkeypatch, keep)
    m.train()
    m.set_dropout_generator(torch.Generator().manual_seed(0))
    m(ids, tt, am, mlm_labels=labels, nsp_labels=nsp_labels).loss.backward()
    ours = _grads(m)

    leaves = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    ref = _reference(name, leaves, ids, tt, am, lens, pred, keep.reference)
    sel = labels != -100
    mlm = ref["mlm"] if name == "d2l" else ref["mlm"][sel]  # d2l's rows are already the pred_positions, in order
    loss = F.cross_entropy(mlm, labels[sel]) + F.cross_entropy(ref["nsp"], nsp_labels)
    loss.backward()
    if name == "original BERT":
        theirs = {k: p.grad for k, p in ref["model"].named_parameters() if p.grad is not None}
    else:
        theirs = {k: v.grad for k, v in leaves.items() if v.grad is not None}

    # A gradient above rounding: the key biases get none in exact arithmetic (softmax ignores a shift shared by a
    # query's scores), only float noise of ~1e-10, in the seed as here.
    trained = {k for k, g in ours.items() if g.abs().max() > 1e-6}
    assert trained == {k for k, g in theirs.items() if g.abs().max() > 1e-6}
    assert set(ours) == set(theirs)
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], atol=1e-5, rtol=1e-4, msg=k)
    frozen = {k for k, p in m.named_parameters() if not p.requires_grad}
    emb = m.bert.embeddings
    word = emb.word_embeddings.weight.grad
    if name == "d2l":  # seed 004: X + self.pos_embedding.data[...]
        assert frozen == {"bert.embeddings.position_embeddings.weight"}
    else:
        assert not frozen
    if name == CODERTIMO:  # nn.Embedding(padding_idx=0): the row never trains (BERT's also gets the tied decoder's)
        assert emb.word_embeddings.padding_idx == 0 and torch.all(word[0] == 0)
    elif name == "original BERT":
        assert emb.word_embeddings.padding_idx == 0
    else:  # a plain nn.Embedding: the [PAD] row is a parameter like the others
        assert emb.word_embeddings.padding_idx is None
    if name == "blog BertModel":  # ... and the blog attends to padding, so that row really trains
        assert word[0].abs().sum() > 0
    if name == CODERTIMO:
        assert torch.all(emb.token_type_embeddings.weight.grad[0] == 0)  # SegmentEmbedding(padding_idx=0)

    before = {k: p.detach().clone() for k, p in m.named_parameters()}
    torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1).step()
    changed = {k for k, p in m.named_parameters() if not torch.equal(p.detach(), before[k])}
    assert trained <= changed and not changed & frozen


def test_the_published_d2l_trains_its_position_table():
    """train_position_embeddings=true gives d2l 1.0.3's model (X + self.pos_embedding[...]): its gradient equals
    the package's, where seed 004's text (the preset) gives none."""
    m, W = _model("d2l", train_position_embeddings=True)
    ids, tt, am, lens, pred, labels, nsp_labels = _batch()
    m.eval()
    m(ids, tt, am, mlm_labels=labels, nsp_labels=nsp_labels).loss.backward()
    leaves = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    ref = R.d2l_model(leaves, ids, tt, lens, pred, heads=4, train_positions=True)
    (F.cross_entropy(ref["mlm"], labels[labels != -100]) + F.cross_entropy(ref["nsp"], nsp_labels)).backward()
    key = "bert.embeddings.position_embeddings.weight"
    g = m.bert.embeddings.position_embeddings.weight.grad
    assert g[:T].abs().sum() > 0 and torch.all(g[T:] == 0)  # rows past the input length get nothing, as in d2l
    torch.testing.assert_close(g, leaves[key].grad, atol=1e-5, rtol=1e-4)


def _count_dropouts(model, monkeypatch, *args) -> int:
    """Dropout applications in one forward: Dropout modules in train mode with p > 0, plus the attention dropouts
    F.scaled_dot_product_attention applies inside (the path without a private generator)."""
    n = 0

    def count(mod, args):
        nonlocal n
        n += mod.training and mod.p > 0
    hooks = [mod.register_forward_pre_hook(count) for mod in model.modules() if isinstance(mod, Dropout)]
    sdpa = F.scaled_dot_product_attention

    def counting_sdpa(*a, dropout_p=0.0, **k):
        nonlocal n
        n += dropout_p > 0
        return sdpa(*a, dropout_p=dropout_p, **k)
    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    with torch.no_grad():
        model(*args)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    for h in hooks:
        h.remove()
    return n


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("size", ["tiny", "paper"])
def test_real_dropout_rate_applies_as_many_dropouts_as_the_seed(name, size, monkeypatch):
    """With the preset's own rates (original BERT's tiny size: none at all, so no dropout runs) one forward applies
    the seed's number of dropouts, with the trainer's private generator and without one (then attention dropout runs
    inside F.scaled_dot_product_attention)."""
    b = preset(name, size)[0]
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**{**b, **DIMS}))
    ids, tt, am, *_ = _batch()
    p = b["hidden_dropout_prob"]
    want = len(_expected(name, 2)) if p > 0 else 0
    m.train()
    assert _count_dropouts(m, monkeypatch, ids, tt, am) == want
    m.set_dropout_generator(torch.Generator().manual_seed(1))
    assert _count_dropouts(m, monkeypatch, ids, tt, am) == want
    m.eval()
    assert _count_dropouts(m, monkeypatch, ids, tt, am) == 0
    blocks = [layer.dropout for layer in m.bert.encoder.layer]
    assert all(d is not None for d in blocks) if name == CODERTIMO else all(d is None for d in blocks)


# ------------------------------------------------------------------ done when: BERT-pytorch at its own size

@pytest.fixture(scope="module")
def bert_pytorch_seed_size():
    """The codertimo preset at seed size (BERT-base: 768 x 12 layers x 12 heads, FFN 3072) holding the weights of a
    BERT-pytorch BERTLM (its own parameter names, drawn as its modules draw them)."""
    cfg = BertConfig(vocab_size=V, **preset(CODERTIMO, "paper")[0])
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.intermediate_size) == (768, 12, 12, 3072)
    assert cfg.block_dropout and cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.1
    Wp = R.bert_pytorch_weights(V, 768, 12, 3072, torch.Generator().manual_seed(0))
    m = BertForPreTraining(cfg)
    m.load_state_dict(R.to_bertcore(Wp), strict=True)  # every BERT-pytorch parameter has its one counterpart
    return m, Wp


def _tutorial003_batch():
    """Tutorial 003's format at its seq_len 20: <sos>=3 first, segment labels 1/2 with 0 for padding."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (B, 20), generator=g)
    lens = torch.tensor([20, 13, 8])
    real = torch.arange(20)[None, :] < lens[:, None]
    ids[:, 0] = 3
    ids[~real] = 0
    tt = ((torch.arange(20)[None, :] >= (lens // 2)[:, None]) & real).long()
    seg = torch.where(real, tt + 1, torch.zeros_like(tt))
    return ids, tt, real.long(), seg


def _train_forward_all_keep(m, Wp, monkeypatch, dtype):
    """(bertcore's output, BERT-pytorch's, bertcore's dropout places, BERT-pytorch's) in train mode, all-keep mask."""
    ids, tt, am, seg = _tutorial003_batch()
    keep = KeepAll(0.1, 0.1)
    monkeypatch.setattr(bertcore_functional, "_keep_mask", KeepAll.keep_mask)
    places = _hook_places(m)
    m.to(dtype).train()
    m.set_dropout_generator(torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = m(ids, tt, am, output_attentions=True, output_hidden_states=True)
        ref = R.bert_pytorch_lm({k: v.to(dtype) for k, v in Wp.items()}, ids, seg, heads=12, drop=keep.reference)
    monkeypatch.undo()
    return ours, ref, [p for p, _ in places], keep.places


def _assert_equal_outputs(ours, ref, atol, rtol):
    torch.testing.assert_close(ours.mlm_logits.log_softmax(-1), ref["mlm"], atol=atol, rtol=rtol)
    torch.testing.assert_close(ours.nsp_logits.log_softmax(-1), ref["nsp"], atol=atol, rtol=rtol)
    for a, b in zip(ours.hidden_states, ref["hidden"], strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)
    for a, b in zip(ours.attentions, ref["attentions"], strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def test_codertimo_at_seed_size_trains_as_bert_pytorch(bert_pytorch_seed_size, monkeypatch):
    """Done when (issue 26): with BERT-pytorch's weights and an all-keep mask in train mode the seed-size preset
    equals BERT-pytorch's BERTLM to 1e-5 (log-probabilities, every block's output, attention probabilities), and
    with the real rate it applies BERT-pytorch's number of dropouts per forward: 1 + 5 x 12 = 61.

    In float64 the two agree to 1e-5 absolute (the float32 sinusoidal tables differ in the last bits); in float32,
    as the model trains, to 1e-5 relative: 12 pre-LN blocks, whose residual stream only grows, leave log-probabilities
    of about -10 with float32 rounding of about 1e-5 absolute."""
    m, Wp = bert_pytorch_seed_size
    ours, ref, places, ref_places = _train_forward_all_keep(m, Wp, monkeypatch, torch.float32)
    _assert_equal_outputs(ours, ref, atol=1e-5, rtol=1e-5)
    assert places == ref_places == _expected(CODERTIMO, 12) and len(places) == 61
    ids, tt, am, seg = _tutorial003_batch()
    m.eval()
    with torch.no_grad():  # eval mode: the same model without any dropout
        ev, ev_ref = m(ids, tt, am), R.bert_pytorch_lm(Wp, ids, seg, heads=12)
    torch.testing.assert_close(ev.mlm_logits.log_softmax(-1), ev_ref["mlm"], atol=1e-5, rtol=1e-5)
    m.train()
    m.set_dropout_generator(None)  # the real rate, attention dropout inside F.scaled_dot_product_attention
    assert _count_dropouts(m, monkeypatch, ids, tt, am) == 61
    m.set_dropout_generator(torch.Generator().manual_seed(0))  # the trainer's path
    assert _count_dropouts(m, monkeypatch, ids, tt, am) == 61
    ours, ref, _, _ = _train_forward_all_keep(m, Wp, monkeypatch, torch.float64)
    _assert_equal_outputs(ours, ref, atol=1e-5, rtol=0)
