"""The GPU fast path (bertcore.model.fast_path, issue 43 §3), checked on a CPU: fused attention dropout taken when
asked and reproducible per (seed, rank, step); the padded vocabulary, unpadded sequences and compiled layers give
the numbers of the plain path; checkpoints and the HF export keep vocab_size rows; a CPU trainer keeps none of it."""
import copy

import pytest
import torch
import torch.nn.functional as F
import transformers

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.io.checkpoint import ModelBundle, load_checkpoint, save_checkpoint
from bertcore.io.hf_interop import export_hf
from bertcore.model import fast_path
from bertcore.model.bert import BertForPreTraining
from bertcore.model.fast_path import FastPath, device_dropout_seed, padded_decoder, seed_device_dropout
from bertcore.model.mlm_loss import decoder_of, mlm_loss_and_hits
from bertcore.training.trainer import Trainer

V = 123  # not a multiple of 64: the padded decoder has 128 rows
SMALL = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=40, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def _model(seed=0, **kw) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig(**{**SMALL, **kw}))


def _batch(seed=0, B=4, T=24):
    """A batch with 40% of its positions [PAD] and 15% of the real ones selected for MLM."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = 2
    tt = torch.zeros_like(ids)
    tt[:, T // 3:] = 1
    am = torch.ones_like(ids)
    for b, n in enumerate((T, 17, 9, 12)[:B]):
        am[b, n:] = 0
    ids[am == 0] = 0
    labels = torch.where((torch.rand(B, T, generator=g) < 0.15) & (am == 1), ids, torch.full_like(ids, -100))
    labels[:, 1] = ids[:, 1]  # at least one selected row per sequence
    nsp = torch.tensor([0, 1, 1, 0][:B])
    return ids, tt, am, labels, nsp


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _step(model, batch, **kw):
    ids, tt, am, labels, nsp = batch
    model.zero_grad(set_to_none=True)
    out = model(ids, tt, am, mlm_labels=labels, nsp_labels=nsp, return_mlm_logits=False, **kw)
    out.loss.backward()
    return out, _grads(model)


def test_for_device_turns_everything_on_for_cuda_and_nothing_on_a_cpu():
    assert FastPath.for_device("cpu", compile=True) == FastPath()
    cuda = FastPath.for_device("cuda:0")
    assert (cuda.fused_dropout, cuda.vocab_multiple, cuda.unpad_above, cuda.compile_layers) == (True, 64, 0.1, False)
    assert FastPath.for_device("cuda", compile=True).compile_layers


def test_a_cpu_trainer_keeps_the_private_dropout_generator_and_no_fast_path():
    tr = Trainer(BertConfig(), TrainConfig(steps=2, eval_every=0, snapshot_every=0), builtin_corpus(seed=0))
    assert tr.fast == FastPath() and tr.model.fast == FastPath()
    gens = {id(m.generator) for m in tr.model.modules() if hasattr(m, "generator")}
    assert gens == {id(tr._dropout_gen)}


def test_fused_dropout_runs_inside_sdpa_and_the_private_generator_does_not(monkeypatch):
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*a, **kw):
        calls.append(kw.get("dropout_p", 0.0))
        return sdpa(*a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    batch = _batch()
    private = _model().train()
    private.set_dropout_generator(torch.Generator().manual_seed(1))
    _step(private, batch)
    assert calls == []  # the explicit softmax: the mask comes from the private generator
    fused = _model().train()
    fused.set_dropout_generator(torch.Generator().manual_seed(1))
    fused.set_fast_path(FastPath(fused_dropout=True))
    assert fused.dropout_generator is None
    assert all(m.generator is None for m in fused.modules() if hasattr(m, "generator"))
    _step(fused, batch)
    assert calls == [0.1, 0.1]  # one fused call per layer, with the dropout rate


def test_fused_dropout_is_reproducible_per_seed_rank_and_step():
    batch = _batch()
    model = _model().train()
    model.set_fast_path(FastPath(fused_dropout=True))

    def loss(seed, rank, step):
        seed_device_dropout(torch.device("cpu"), seed, rank, step)
        return float(_step(model, batch)[0].loss.detach())

    a = loss(7, 0, 3)
    assert loss(7, 0, 3) == a
    assert len({a, loss(7, 1, 3), loss(7, 0, 4), loss(8, 0, 3)}) == 4
    seeds = {device_dropout_seed(s, r, t) for s in range(4) for r in range(4) for t in range(64)}
    assert len(seeds) == 4 * 4 * 64 and max(seeds) < 2**63


def test_without_dropout_fused_and_readable_paths_agree():
    model = _model(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train()
    model.set_fast_path(FastPath(fused_dropout=True))
    ids, tt, am, _, _ = _batch()
    fast = model(ids, tt, am)
    readable = model(ids, tt, am, output_attentions=True)  # a tap: every layer takes the readable path
    real = am.bool()
    assert torch.allclose(fast.mlm_logits[real], readable.mlm_logits[real], rtol=1e-5, atol=1e-5)
    assert torch.allclose(fast.nsp_logits, readable.nsp_logits, rtol=1e-5, atol=1e-5)


def test_padded_decoder_adds_minus_inf_rows_that_never_win():
    model = _model()
    w, b = padded_decoder(*decoder_of(model.cls.predictions), 64)
    assert w.shape == (128, 32) and b.shape == (128,)
    assert torch.equal(w[V:], torch.zeros(128 - V, 32)) and torch.isinf(b[V:]).all() and (b[V:] < 0).all()
    z = F.linear(torch.randn(50, 32) * 100, w, b)
    assert int(z.argmax(-1).max()) < V and torch.equal(z.softmax(-1)[:, V:], torch.zeros(50, 128 - V))
    assert padded_decoder(w[:V], b[:V], 1)[0].shape[0] == V and padded_decoder(w, b, 64)[0].shape[0] == 128


@pytest.mark.parametrize("head", ["transform", "linear", "mlp"])
def test_padded_vocabulary_gives_the_same_loss_hits_and_gradients(head):
    batch = _batch(1)
    plain, padded = _model(mlm_head=head).eval(), _model(mlm_head=head).eval()
    padded.set_fast_path(FastPath(vocab_multiple=64))
    a, ga = _step(plain, batch)
    b, gb = _step(padded, batch)
    assert torch.allclose(a.mlm_loss, b.mlm_loss, rtol=1e-6) and int(a.mlm_hits) == int(b.mlm_hits)
    assert ga.keys() == gb.keys()
    for n in ga:
        assert ga[n].shape == gb[n].shape and torch.allclose(ga[n], gb[n], rtol=1e-5, atol=1e-7), n
    ids, tt, am, labels, _ = batch
    assert padded(ids, tt, am).mlm_logits.shape == (4, 24, V)  # every output keeps vocab_size columns
    assert padded(ids, tt, am, mlm_labels=labels).mlm_logits.shape[-1] == V


def test_padded_vocabulary_under_bf16_autocast_matches_the_plain_decoder():
    model = _model().eval()
    h, t = torch.randn(40, 32), torch.randint(0, V, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, ha = mlm_loss_and_hits(model.cls.predictions, h, t)
        b, hb = mlm_loss_and_hits(model.cls.predictions, h, t, 64)
    assert torch.allclose(a.float(), b.float(), rtol=1e-2) and int(ha) == int(hb)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_unpadded_batches_give_the_padded_path_numbers(norm):
    """Outputs at every real token, the losses and every gradient (the last layer on its rows, too)."""
    batch = _batch(2)
    plain, unpadded = _model(norm_placement=norm, final_layer_norm=norm == "pre").eval(), None
    unpadded = copy.deepcopy(plain)
    unpadded.set_fast_path(FastPath(unpad_above=0.1))
    ids, tt, am, _, _ = batch
    assert fast_path.Unpadded.share(am) > 0.1
    with torch.no_grad():  # the encoder alone, every position
        x = plain.bert.embeddings(ids, tt, am)
        mask = plain.bert.attention_mask(am)
        h0 = plain.bert.encoder(x, mask)
        h1 = plain.bert.encoder(x, mask, unpad=fast_path.Unpadded(am, mask))
    real = am.bool()
    assert torch.allclose(h0[real], h1[real], rtol=1e-5, atol=1e-6)
    assert torch.equal(h1[~real], torch.zeros_like(h1[~real]))
    a, ga = _step(plain, batch)
    b, gb = _step(unpadded, batch)
    assert torch.allclose(a.loss, b.loss, rtol=1e-6) and int(a.mlm_hits) == int(b.mlm_hits)
    for n in ga:
        assert torch.allclose(ga[n], gb[n], rtol=1e-4, atol=1e-6), n


def test_unpadding_only_above_its_share_and_only_with_a_padding_mask(monkeypatch):
    made = []
    real = fast_path.Unpadded.__init__

    def spy(self, *a):
        made.append(1)
        real(self, *a)

    monkeypatch.setattr(fast_path.Unpadded, "__init__", spy)
    ids, tt, am, labels, _ = _batch()
    share = fast_path.Unpadded.share(am)
    for unpad_above, padding_mask, expect in [(share - 0.01, True, 1), (share + 0.01, True, 0),
                                              (0.0, False, 0), (None, True, 0)]:
        made.clear()
        m = _model(attention_padding_mask=padding_mask).eval()
        m.set_fast_path(FastPath(unpad_above=unpad_above))
        with torch.no_grad():
            m(ids, tt, am, mlm_labels=labels)  # the loss path
            m(ids, tt, am)  # every position asked for: never unpadded (the [PAD] rows keep their values)
            m(ids, tt, am, mlm_labels=labels, output_attentions=True)  # a tap (trace, the readable path) never
        assert len(made) == expect, (unpad_above, padding_mask)


def test_compiled_layers_trace_in_one_graph_and_give_the_same_numbers():
    batch = _batch(3)
    plain = _model(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train()
    comp = copy.deepcopy(plain)
    comp.set_fast_path(FastPath(unpad_above=0.1, compile_layers=True, compile_backend="eager"))
    assert all(layer.compile_backend == "eager" for layer in comp.bert.encoder.layer)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    a, ga = _step(plain, batch)
    b, gb = _step(comp, batch)
    assert not torch._dynamo.utils.counters["graph_break"]  # each layer is one graph
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    assert torch.allclose(a.loss, b.loss, rtol=1e-6)
    for n in ga:
        assert torch.allclose(ga[n], gb[n], rtol=1e-4, atol=1e-6), n
    comp.set_fast_path(FastPath())
    assert all(layer.compile_backend is None for layer in comp.bert.encoder.layer)


def test_a_fast_path_model_saves_loads_and_exports_vocab_size_rows(tmp_path):
    tok = WordTokenizer.build(["the dog runs in the park .", "a cat eats food !", "the dogs run ."])
    torch.manual_seed(5)
    model = BertForPreTraining(BertConfig(**{**SMALL, "vocab_size": tok.vocab_size}))
    model.set_fast_path(FastPath.for_device("cuda"))  # the switches a GPU run trains with
    ids, tt, am, labels, nsp = _batch(4)
    ids = ids.clamp(max=tok.vocab_size - 1)
    labels = torch.where(labels >= 0, ids, labels)
    model.train()
    _step(model, (ids, tt, am, labels, nsp))  # the training path runs (padded decoder, unpadded batch)
    model.eval()
    bundle = ModelBundle(model=model, tokenizer=tok, history=None, name="t", source="test")
    loaded = load_checkpoint(save_checkpoint(bundle, tmp_path / "ck")).model
    assert loaded.bert.embeddings.word_embeddings.weight.shape[0] == tok.vocab_size
    assert loaded.cls.predictions.bias.shape == (tok.vocab_size,)
    with torch.no_grad():
        o, o2 = model(ids, tt, am), loaded(ids, tt, am)
    assert o.mlm_logits.shape[-1] == tok.vocab_size and torch.allclose(o.mlm_logits, o2.mlm_logits, atol=1e-6)
    out = export_hf(bundle, tmp_path / "hf")
    hf = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    assert hf.config.vocab_size == tok.vocab_size
    with torch.no_grad():
        h = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
    real = am.bool()
    assert torch.allclose(h.prediction_logits[real], o.mlm_logits[real], atol=1e-5)
    assert torch.allclose(h.seq_relationship_logits, o.nsp_logits, atol=1e-5)
