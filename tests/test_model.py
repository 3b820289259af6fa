"""bertcore.model: parity with HF transformers, SDPA vs explicit attention, padding, variants."""
import itertools
import math

import pytest
import torch
import transformers

from bertcore.config import BertConfig, estimate
from bertcore.model.bert import BertForPreTraining, count_parameters
from bertcore.model.functional import cross_entropy_and_hits, sinusoidal_table

SMALL = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=40)


def _batch(seed=0, B=3, T=20, V=120):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = 2
    tt = torch.zeros_like(ids)
    tt[:, T // 2:] = 1
    am = torch.ones_like(ids)
    am[1, 15:] = 0
    am[2, 8:] = 0
    ids[am == 0] = 0
    return ids, tt, am


@pytest.mark.parametrize("act,hf_act", [("gelu", "gelu"), ("gelu_tanh", "gelu_new"), ("relu", "relu")])
def test_parity_with_transformers(act, hf_act):
    hc = transformers.BertConfig(**SMALL, hidden_act=hf_act, attn_implementation="eager")
    torch.manual_seed(1)
    hf = transformers.BertForPreTraining(hc).eval()
    ours = BertForPreTraining(BertConfig(**SMALL, hidden_act=act)).eval()
    sd = {k: v for k, v in hf.state_dict().items() if not k.startswith("cls.predictions.decoder")}
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    assert not missing and not unexpected
    ids, tt, am = _batch()
    with torch.no_grad():
        h = hf(input_ids=ids, token_type_ids=tt, attention_mask=am, output_attentions=True, output_hidden_states=True)
        o = ours(ids, tt, am, output_attentions=True, output_hidden_states=True)
    assert torch.allclose(h.prediction_logits, o.mlm_logits, atol=1e-5)
    assert torch.allclose(h.seq_relationship_logits, o.nsp_logits, atol=1e-5)
    assert len(o.attentions) == 2 and o.attentions[0].shape == (3, 4, 20, 20)
    for a, b in zip(h.attentions, o.attentions):
        assert torch.allclose(a, b, atol=1e-5)
    for a, b in zip(h.hidden_states, o.hidden_states):
        assert torch.allclose(a, b, atol=1e-5)


VARIANTS = list(itertools.product(["learned", "sinusoidal"], ["post", "pre"], ["transform", "linear"],
                                  ["pooler", "first_token"]))


@pytest.mark.parametrize("pe,norm,mlm,nsp", VARIANTS)
def test_sdpa_equals_explicit_and_variants_train(pe, norm, mlm, nsp):
    torch.manual_seed(0)
    cfg = BertConfig(**SMALL, position_embedding=pe, norm_placement=norm, mlm_head=mlm, nsp_head=nsp)
    m = BertForPreTraining(cfg).eval()
    ids, tt, am = _batch()
    with torch.no_grad():
        fast = m(ids, tt, am)  # SDPA path
        slow = m(ids, tt, am, output_attentions=True)  # explicit path
    assert torch.allclose(fast.mlm_logits, slow.mlm_logits, atol=1e-5)
    assert torch.allclose(fast.nsp_logits, slow.nsp_logits, atol=1e-5)
    # one training step runs and gives finite gradients to every trainable parameter that is used
    m.train()
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    out = m(ids, tt, am, mlm_labels=labels, nsp_labels=torch.tensor([0, 1, 0]))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert out.mlm_logits.shape == (3, 120)
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_padding_is_masked_out():
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**SMALL)).eval()
    ids, tt, am = _batch()
    with torch.no_grad():
        o = m(ids, tt, am, output_attentions=True)
        # padded keys get exactly zero probability; every row sums to 1
        for a in o.attentions:
            assert torch.all(a[2, :, :, 8:] == 0)
            assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)), atol=1e-5)
        # the un-padded prefix alone gives the same outputs at the real positions
        alone = m(ids[2:3, :8], tt[2:3, :8], am[2:3, :8], output_attentions=True)
    assert torch.allclose(alone.mlm_logits[0], o.mlm_logits[2, :8], atol=1e-5)
    assert torch.allclose(alone.nsp_logits[0], o.nsp_logits[2], atol=1e-5)


def test_sparse_mlm_logits_equal_dense_at_selected_positions():
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**SMALL)).eval()
    ids, tt, am = _batch()
    labels = torch.full_like(ids, -100)
    labels[0, 4], labels[1, 7], labels[2, 2] = 9, 10, 11
    with torch.no_grad():
        dense = m(ids, tt, am).mlm_logits
        sparse = m(ids, tt, am, mlm_labels=labels)
    b, t = sparse.mlm_positions
    assert sparse.mlm_logits.shape == (3, 120)
    assert torch.allclose(sparse.mlm_logits, dense[b, t], atol=1e-6)
    expected = torch.nn.functional.cross_entropy(dense[b, t], torch.tensor([9, 10, 11]))
    assert torch.allclose(sparse.mlm_loss, expected, atol=1e-6)


def test_fused_mlm_loss_equals_cross_entropy_in_value_gradient_and_hits():
    """cross_entropy_and_hits (the MLM loss the model trains with) against F.cross_entropy and argmax."""
    g = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64):
        z = (torch.randn(300, 997, generator=g) * 3).to(dtype)
        z[7, 5] = 50.0  # a confident row, and a row whose target is the top logit
        t = torch.randint(0, 997, (300,), generator=g)
        t[7] = 5
        z[8, t[8]] = -150.0  # softmax underflows to 0 at the target: the loss must stay finite and exact
        a = z.clone().requires_grad_()
        b = z.clone().requires_grad_()
        loss, hits = cross_entropy_and_hits(a, t)
        (loss * 2.5).backward()
        ref = torch.nn.functional.cross_entropy(b, t)
        (ref * 2.5).backward()
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        assert loss.dtype == dtype and abs(loss.item() - ref.item()) < tol * 10
        assert torch.allclose(a.grad, b.grad, atol=tol, rtol=0)
        assert int(hits) == int((z.argmax(-1) == t).sum()) >= 1
    empty, none = cross_entropy_and_hits(torch.randn(0, 9, requires_grad=True), torch.zeros(0, dtype=torch.long))
    assert empty.item() == 0.0 and int(none) == 0
    z = torch.randn(4, 9, requires_grad=True)
    loss, _ = cross_entropy_and_hits(z, torch.tensor([1, 2, 3, 4]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward once"):
        loss.backward()


def test_embedding_parts_sum_and_layernorm():
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**SMALL, position_embedding="sinusoidal")).eval()
    ids, tt, am = _batch()
    with torch.no_grad():
        o = m(ids, tt, am, output_embeddings=True, output_hidden_states=True)
    e = o.embeddings
    assert torch.allclose(e["sum"], e["token"] + e["position"] + e["segment"])
    assert torch.allclose(e["position"][0], sinusoidal_table(40, 32)[:20])
    assert torch.allclose(e["normed"], o.hidden_states[0], atol=1e-6)
    assert torch.allclose(e["normed"].mean(-1), torch.zeros(3, 20), atol=1e-5)


def test_dropout_generator_makes_training_forward_deterministic():
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**SMALL, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)).train()
    ids, tt, am = _batch()
    outs = []
    for _ in range(2):
        m.set_dropout_generator(torch.Generator().manual_seed(7))
        torch.manual_seed(123 + len(outs))  # the global RNG must not matter
        outs.append(m(ids, tt, am).mlm_logits)
    assert torch.equal(outs[0], outs[1])
    m.set_dropout_generator(torch.Generator().manual_seed(8))
    assert not torch.equal(outs[0], m(ids, tt, am).mlm_logits)


class _CountOps(torch.overrides.TorchFunctionMode):
    """Counts every torch function a forward calls."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _train_ops(**kw) -> tuple[int, torch.Tensor]:
    torch.manual_seed(0)
    m = BertForPreTraining(BertConfig(**SMALL, **kw)).train()
    m.set_dropout_generator(torch.Generator().manual_seed(3))
    ids, tt, am = _batch()
    with torch.no_grad(), _CountOps() as ops:
        out = m(ids, tt, am).mlm_logits
    return ops.n, out


def test_block_dropout_off_or_at_rate_zero_adds_no_op():
    """BERT-pytorch's block dropout (block_dropout) is one dropout per block when on with a rate; switched off, or
    at rate 0, the forward runs exactly the ops (and numbers) it ran without the switch."""
    off, out_off = _train_ops()
    zero, out_zero = _train_ops(block_dropout=True)  # SMALL: hidden_dropout_prob 0
    assert zero == off and torch.equal(out_zero, out_off)
    assert all(layer.dropout is None for layer in BertForPreTraining(BertConfig(**SMALL)).bert.encoder.layer)
    rates = dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    base, _ = _train_ops(**rates)
    on, _ = _train_ops(block_dropout=True, **rates)
    assert on > base  # the counter sees a dropout: one mask and one product per block more


def test_sinusoidal_table_formula():
    t = sinusoidal_table(50, 16)
    assert t.shape == (50, 16)
    pos, i = 7, 3
    assert math.isclose(t[pos, 2 * i], math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(t[pos, 2 * i + 1], math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert torch.allclose(t[0, 1::2], torch.ones(8))
    assert sinusoidal_table(10, 7).shape == (10, 7)


@pytest.mark.parametrize("pe,norm,mlm,nsp", VARIANTS[::3])
def test_estimate_matches_real_parameter_count(pe, norm, mlm, nsp):
    cfg = BertConfig(**SMALL, position_embedding=pe, norm_placement=norm, mlm_head=mlm, nsp_head=nsp)
    counts = count_parameters(BertForPreTraining(cfg))
    est = estimate(cfg)
    assert est["params"] == counts["total"]
    assert {k: v for k, v in counts.items() if k != "total"} == est["params_by_part"]


def test_too_long_input_is_rejected_with_a_fix():
    m = BertForPreTraining(BertConfig(**SMALL))
    with pytest.raises(ValueError, match="truncate"):
        m(torch.ones(1, 41, dtype=torch.long))


def _hf_and_ours(seed=1):
    hc = transformers.BertConfig(**SMALL, attn_implementation="eager")
    torch.manual_seed(seed)
    hf = transformers.BertForPreTraining(hc).eval()
    ours = BertForPreTraining(BertConfig(**SMALL)).eval()
    sd = {k: v for k, v in hf.state_dict().items() if not k.startswith("cls.predictions.decoder")}
    ours.load_state_dict(sd, strict=False)
    return hf, ours


def test_head_mask_all_ones_is_exactly_no_mask():
    _, m = _hf_and_ours()
    ids, tt, am = _batch()
    labels = torch.full_like(ids, -100)
    labels[:, 4] = ids[:, 4]
    with torch.no_grad():
        for kw in (dict(), dict(output_attentions=True), dict(mlm_labels=labels)):
            a = m(ids, tt, am, **kw)
            b = m(ids, tt, am, head_mask=torch.ones(2, 4), **kw)
            assert torch.equal(a.mlm_logits, b.mlm_logits) and torch.equal(a.nsp_logits, b.nsp_logits)


@pytest.mark.parametrize("path", ["sdpa", "explicit", "loss_rows"])
def test_head_mask_equals_scaling_that_heads_values_in_transformers(path):
    """(m P) V = P (m V): masking head h of layer l by m equals scaling rows h*Dh:(h+1)*Dh of that layer's value
    projection by m. transformers 5 dropped head_mask, so the reference is HF's model with its value weights scaled."""
    hf, m = _hf_and_ours()
    ids, tt, am = _batch()
    mask = torch.ones(2, 4)
    mask[0, 1], mask[1, 3], mask[1, 0] = 0.0, 0.0, 0.5
    with torch.no_grad():
        for (layer, head), s in [((0, 1), 0.0), ((1, 3), 0.0), ((1, 0), 0.5)]:
            v = hf.bert.encoder.layer[layer].attention.self.value
            v.weight[head * 8:(head + 1) * 8] *= s
            v.bias[head * 8:(head + 1) * 8] *= s
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
        labels = torch.full_like(ids, -100)
        labels[:, 5] = ids[:, 5]
        if path == "loss_rows":
            o = m(ids, tt, am, mlm_labels=labels, head_mask=mask)
            b, t = o.mlm_positions
            assert torch.allclose(o.mlm_logits, ref.prediction_logits[b, t], atol=1e-5)
        else:
            o = m(ids, tt, am, head_mask=mask, output_attentions=path == "explicit")
            assert torch.allclose(o.mlm_logits, ref.prediction_logits, atol=1e-5)
        assert torch.allclose(o.nsp_logits, ref.seq_relationship_logits, atol=1e-5)
        plain = m(ids, tt, am)
    assert not torch.allclose(plain.nsp_logits, ref.seq_relationship_logits, atol=1e-4)
    if path == "explicit":
        assert torch.all(o.attentions[0][:, 1] == 0) and torch.all(o.attentions[1][:, 3] == 0)
        assert torch.allclose(o.attentions[1][:, 0].sum(-1), torch.full((3, 20), 0.5))


def test_head_mask_per_head_vector_broadcasts_and_bad_shape_is_refused():
    _, m = _hf_and_ours()
    ids, tt, am = _batch()
    vec = torch.tensor([1.0, 0.0, 1.0, 1.0])
    with torch.no_grad():
        a = m(ids, tt, am, head_mask=vec).mlm_logits
        b = m(ids, tt, am, head_mask=vec.expand(2, 4)).mlm_logits
        c = m(ids, tt, am).mlm_logits
    assert torch.equal(a, b) and not torch.allclose(a, c, atol=1e-4)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        m(ids, tt, am, head_mask=torch.ones(3, 4))
