"""Issue 12, truth to the seeds: each seed preset equals its seed's model, rebuilt from the seed's equations.

Every reference (tests/tutorial_references.py) is plain torch written from the seed text (shared/seeds/000-004), not
from bertcore's modules. It reads the same weights and must give the same MLM and NSP outputs and attention
probabilities to 1e-5 (eval mode here; train mode, dropouts and gradients in tests/test_tutorial_training.py).
Inputs are in each seed's own convention (e.g. codertimo's segment labels 1/2 with 0 for padding and its padding
mask (x > 0); d2l's valid_lens).
"""
import math
import re

import pytest
import tutorial_references as R
import torch
import torch.nn.functional as F

from bertcore.config import BertConfig, estimate
from bertcore.errors import ConfigError
from bertcore.model.bert import BertForPreTraining, count_parameters
from bertcore.model.formulas import formulas
from bertcore.presets import PRESETS, preset

V, T = 50, 16
DIMS = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)


def _model(name, **kw):
    torch.manual_seed(0)
    cfg = BertConfig(**{**PRESETS[name][0], **DIMS, **kw})
    m = BertForPreTraining(cfg).eval()
    with torch.no_grad():  # LayerNorm gains and biases away from 1 / 0, so a misplaced norm shows
        for k, p in m.named_parameters():
            if "LayerNorm" in k:
                p.add_(0.3 * torch.randn_like(p))
    return m, {k: v.detach() for k, v in m.state_dict().items()}


def _batch(seed=0):
    """ids (B, T) with [CLS]=2 first, lengths 16, 11, 7; A/B split; 0 = padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, T), generator=g)
    lens = torch.tensor([T, 11, 7])
    real = torch.arange(T)[None, :] < lens[:, None]
    ids[:, 0] = 2
    ids[~real] = 0
    b_start = (lens // 2)[:, None]
    tt = ((torch.arange(T)[None, :] >= b_start) & real).long()  # 0/1, the API's convention
    return ids, tt, real.long(), lens


def _compare(ours, ref, log_softmax):
    mlm, nsp = ours.mlm_logits, ours.nsp_logits
    if log_softmax:  # the seed's heads end in LogSoftmax
        mlm, nsp = mlm.log_softmax(-1), nsp.log_softmax(-1)
    assert torch.allclose(mlm, ref["mlm"], atol=1e-5), (mlm - ref["mlm"]).abs().max()
    assert torch.allclose(nsp, ref["nsp"], atol=1e-5)
    assert len(ours.attentions) == len(ref["attentions"])
    for a, b in zip(ours.attentions, ref["attentions"]):
        assert torch.allclose(a, b, atol=1e-5)


def test_codertimo_preset_equals_bert_pytorch():
    m, W = _model("BERT-pytorch (codertimo)")
    ids, tt, am, lens = _batch()
    # seed 003: segment_label 1 for A (with <sos>, <eos>), 2 for B, 0 for padding; mask = (x > 0)
    seg = torch.where(am.bool(), tt + 1, torch.zeros_like(tt))
    ref = R.bert_pytorch_lm(R.to_bert_pytorch(W), ids, seg, heads=4)
    with torch.no_grad():
        ours = m(ids, tt, am, output_attentions=True)
    _compare(ours, ref, log_softmax=True)
    assert W["bert.embeddings.token_type_embeddings.weight"].shape == (3, 32)
    assert torch.all(W["bert.embeddings.token_type_embeddings.weight"][0] == 0)  # padding_idx=0


def test_blog_preset_equals_blog_bertmodel():
    m, W = _model("blog BertModel", max_position_embeddings=T)  # the blog needs inputs as long as the table
    ids, tt, am, lens = _batch()
    with torch.no_grad():
        ours = m(ids, tt, am, output_attentions=True)
    _compare(ours, R.blog_model(W, ids, tt, heads=4), log_softmax=False)


def test_annotated_preset_equals_annotated_transformer_encoder():
    m, W = _model("Annotated Transformer")
    ids, tt, am, lens = _batch()
    with torch.no_grad():
        ours = m(ids, tt, am, output_attentions=True)
    _compare(ours, R.annotated_encoder(W, ids, heads=4), log_softmax=True)
    assert not any("token_type" in k for k in W)  # the seed's embeddings have no segment part


def test_d2l_preset_equals_d2l_bertmodel():
    m, W = _model("d2l")
    ids, tt, am, valid_lens = _batch()
    pred_positions = torch.tensor([[1, 3, 5], [2, 4, 9], [1, 2, 6]])
    ref = R.d2l_model(W, ids, tt, valid_lens, pred_positions, heads=4)
    labels = torch.full_like(ids, -100)
    for b in range(3):
        labels[b, pred_positions[b]] = ids[b, pred_positions[b]]
    with torch.no_grad():
        ours = m(ids, tt, am, mlm_labels=labels, output_attentions=True)
        fast = m(ids, tt, am, mlm_labels=labels)  # the training path (last layer at the selected rows only)
    _compare(ours, ref, log_softmax=False)
    assert torch.allclose(fast.mlm_logits, ref["mlm"], atol=1e-5) and torch.allclose(fast.nsp_logits, ref["nsp"],
                                                                                     atol=1e-5)


def _configs(size):
    return {n: BertConfig(vocab_size=30522 if size == "paper" else 300, **preset(n, size)[0]) for n in PRESETS}


@pytest.mark.parametrize("size", ["tiny", "paper"])
def test_presets_are_pairwise_different_and_seed_sizes_are_the_seeds(size):
    cfgs = _configs(size)
    dicts = [c.to_dict() for c in cfgs.values()]
    assert all(dicts[i] != dicts[j] for i in range(5) for j in range(i + 1, 5))
    if size == "paper":
        assert 109e6 < estimate(cfgs["original BERT"])["params"] < 111e6  # BERT-base: 110M
        a = cfgs["Annotated Transformer"]
        assert (a.hidden_size, a.num_hidden_layers, a.num_attention_heads, a.intermediate_size) == (512, 6, 8, 2048)
        d = cfgs["d2l"]
        assert (d.hidden_size, d.num_hidden_layers, d.num_attention_heads, d.intermediate_size,
                d.hidden_dropout_prob) == (768, 2, 4, 1024, 0.2)


def test_inits_follow_the_seeds():
    """bert: normal(0, initializer_range): 1/sqrt(hidden) at tiny size, BERT's 0.02 at BERT-base size;
    pytorch: nn.Embedding N(0, 1), nn.Linear U(+-1/sqrt(fan_in));
    xavier_uniform: every matrix within +-sqrt(6 / (fan_in + fan_out)) with that uniform's std."""
    models = {n: BertForPreTraining(c) for n, c in _configs("tiny").items()}
    w = models["original BERT"].bert.encoder.layer[0].intermediate.dense.weight  # hidden 64
    assert abs(w.std().item() - 1 / math.sqrt(64)) < 0.004
    assert _configs("paper")["original BERT"].initializer_range == 0.02  # BERT-base: BERT's own value
    e = models["d2l"].bert.embeddings.word_embeddings.weight[1:]
    assert abs(e.std().item() - 1.0) < 0.05
    lin = models["BERT-pytorch (codertimo)"].bert.encoder.layer[0].intermediate.dense.weight  # (256, 64)
    assert lin.abs().max() <= 1 / math.sqrt(64) and lin.abs().max() > 0.9 / math.sqrt(64)
    xa = models["Annotated Transformer"].bert.encoder.layer[0].intermediate.dense.weight
    bound = math.sqrt(6 / (64 + 256))
    assert xa.abs().max() <= bound and abs(xa.std().item() - bound / math.sqrt(3)) < 0.01


def test_param_estimate_matches_every_preset():
    for n, c in _configs("tiny").items():
        assert estimate(c)["params"] == count_parameters(BertForPreTraining(c))["total"], n


def test_nsp_loss_counts_both_labels():
    """The fix kept from BERT-pytorch's defect: its NLLLoss(ignore_index=0) skipped every NotNext (label 0)."""
    m, _ = _model("BERT-pytorch (codertimo)")
    ids, tt, am, _ = _batch()
    labels = torch.tensor([0, 1, 0])
    with torch.no_grad():
        out = m(ids, tt, am, nsp_labels=labels)
    logp = out.nsp_logits.log_softmax(-1)
    assert torch.allclose(out.nsp_loss, -(logp[torch.arange(3), labels]).mean(), atol=1e-6)


def test_ffn_dropout_sits_inside_the_ffn_only_where_the_seed_has_it():
    """W2 Drop(act(W1 x)) in BERT-pytorch and the Annotated Transformer (invisible in eval mode, so checked here)."""
    for n, c in _configs("tiny").items():
        m = BertForPreTraining(c)
        inter = m.bert.encoder.layer[0].intermediate.train()
        x = torch.randn(4, 64)
        if n in ("BERT-pytorch (codertimo)", "Annotated Transformer"):
            zeros = (inter(x) == 0) & (F.gelu(inter.dense(x)) != 0)
            assert inter.dropout.p == 0.1 and zeros.any()
        else:
            assert inter.dropout is None and torch.equal(inter(x), inter.act(inter.dense(x)))


def test_d2l_positions_never_train_and_its_embedding_sum_has_no_dropout():
    """d2l adds ``pos_embedding.data`` (no gradient reaches its N(0, 1) table) and applies no dropout to the
    embedding sum; every other preset trains its learned table and drops out the sum (train mode)."""
    ids, tt, am, _ = _batch()
    for n, c in _configs("tiny").items():
        torch.manual_seed(0)
        m = BertForPreTraining(c).train()
        emb = m.bert.embeddings
        a, b = emb(ids, tt, am), emb(ids, tt, am)
        if n == "d2l":
            assert torch.equal(a, b) and emb.dropout is None
            assert r"P \sim \mathcal{N}(0, 1)" in formulas(c)["embeddings"]
        else:
            assert emb.dropout.p == c.hidden_dropout_prob
            assert torch.equal(a, b) == (c.hidden_dropout_prob == 0)  # original BERT at tiny size: no dropout
        if c.position_embedding != "learned":
            continue
        pos = emb.position_embeddings.weight
        before = pos.detach().clone()
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
        out = m(ids, tt, am, nsp_labels=torch.tensor([0, 1, 0]))
        out.nsp_loss.backward()
        opt.step()
        if n == "d2l":
            assert not pos.requires_grad and pos.grad is None and torch.equal(pos, before)
            assert abs(before.std().item() - 1.0) < 0.05  # torch.randn's N(0, 1), as the seed draws it
        else:
            assert pos.requires_grad and not torch.equal(pos.detach(), before)


def test_frozen_positions_need_a_learned_table():
    with pytest.raises(ConfigError, match="train_position_embeddings=false"):
        BertConfig(vocab_size=100, position_embedding="sinusoidal", train_position_embeddings=False)
    with pytest.raises(ConfigError, match="embedding_dropout"):
        BertConfig(vocab_size=100, embedding_dropout="no")


# which config fields each formula depends on (the mlm head shows the activation unless it is one Linear)
_FORMULA_FIELDS = {
    "embeddings": lambda c: (c.embedding_scale, c.embedding_layer_norm, c.position_embedding, c.type_vocab_size > 0,
                             c.segment_ids, c.embedding_dropout, c.train_position_embeddings),
    "attention": lambda c: (c.attention_padding_mask,),
    "sublayer": lambda c: (c.norm_placement, c.final_layer_norm, c.ffn_dropout, c.block_dropout, c.hidden_act),
    "layer_norm": lambda c: (c.layer_norm_style, c.layer_norm_eps),
    "mlm": lambda c: (c.mlm_head, c.hidden_act if c.mlm_head != "linear" else None),
    "nsp": lambda c: (c.nsp_head,),
}


def test_formulas_differ_exactly_where_the_preset_models_differ():
    cfgs = _configs("tiny")
    rendered = {n: formulas(c) for n, c in cfgs.items()}
    names = list(cfgs)
    for key, fields in _FORMULA_FIELDS.items():
        for i, a in enumerate(names):
            tex = rendered[a][key]
            lefts = len(re.findall(r"\\left[(\[.]", tex))
            assert tex.count("{") == tex.count("}") and lefts == tex.count(r"\right"), (a, key)
            for b in names[i + 1:]:
                same_model = fields(cfgs[a]) == fields(cfgs[b])
                assert (rendered[a][key] == rendered[b][key]) == same_model, (key, a, b)
    bert, cod, ann = rendered["original BERT"], rendered["BERT-pytorch (codertimo)"], \
        rendered["Annotated Transformer"]
    assert r"\sqrt{\sigma^2 + \epsilon}" in bert["layer_norm"] and r"10^{-12}" in bert["layer_norm"]
    assert r"{s + \epsilon}" in cod["layer_norm"] and r"\tfrac{1}{d-1}" in cod["layer_norm"]
    assert r"\mathrm{LN}\big(x + " in bert["sublayer"] and r"F(\mathrm{LN}(x))" in cod["sublayer"]
    assert r"x + \mathrm{LN}\big(" in rendered["blog BertModel"]["sublayer"]
    assert r"\sqrt{d}\," in ann["embeddings"] and "S[s_t]" not in ann["embeddings"]
    assert r"\mathrm{LN}(E_" in bert["embeddings"] and r"\mathrm{LN}(E_" not in cod["embeddings"]
    assert r"\{1, 2\}" in cod["embeddings"] and r"\mathrm{IsNext}, \mathrm{NotNext}" in bert["nsp"]
    assert r"W_2\,\mathrm{LN}\big(\mathrm{ReLU}" in rendered["d2l"]["mlm"] and "tied" in bert["mlm"]


def test_tutorial003_worked_example_ids():
    """The ids printed in tutorial 003: vocabulary, masked input, target, segment labels, padding to 20, mask
    (x > 0)."""
    from bertcore.data.bert_pytorch_vocab import bert_pytorch_example

    e = bert_pytorch_example()
    assert e["vocab"] == {"<pad>": 0, "<unk>": 1, "<eos>": 2, "<sos>": 3, "<mask>": 4, "the": 5, "I": 6, "Welcome": 7,
                          "all": 8, "can": 9, "here": 10, "jungle": 11, "night": 12, "stay": 13, "to": 14}
    assert e["a_ids"] == [7, 14, 5] and e["b_ids"] == [5, 11]
    assert e["bert_input"] == [3, 4, 14, 5, 2, 5, 10, 2] + [0] * 12
    assert e["bert_label"] == [0, 7, 0, 0, 0, 0, 11, 0] + [0] * 12
    assert e["segment_label"] == [1, 1, 1, 1, 1, 2, 2, 2] + [0] * 12
    assert e["mask"] == [1] * 8 + [0] * 12


def test_codertimo_model_looks_up_the_seed_segment_labels():
    """0/1 token types + padding mask in, the seed's 1/2/0 segment labels looked up (data helper and model agree)."""
    from bertcore.data.bert_pytorch_vocab import bert_pytorch_example
    from bertcore.data.pretraining import segment_labels

    e = bert_pytorch_example()
    seg = torch.tensor([e["segment_label"]])
    am = torch.tensor([e["mask"]])
    tt = (seg == 2).long()
    assert torch.equal(segment_labels(tt, am), seg)
    m, W = _model("BERT-pytorch (codertimo)")
    assert torch.equal(m.bert.embeddings.segment_ids(tt, am), seg)
    ids = torch.tensor([e["bert_input"]]).clamp(max=V - 1)
    with torch.no_grad():
        _, cache = m.run_with_cache(ids, tt, am, names="embeddings.segment")
    assert torch.equal(cache["embeddings.segment"][0], W["bert.embeddings.token_type_embeddings.weight"][seg[0]])


def test_fixed_padding_and_expected_selection_rate_on_the_tutorial_corpus():
    from bertcore.data.corpus import tutorial_corpus
    from bertcore.data.pretraining import PretrainingData, expected_selection_rate, masking_rule, masking_stats
    from bertcore.data.tokenization import WordTokenizer

    corpus = tutorial_corpus()
    data = PretrainingData(corpus, WordTokenizer.build(corpus.texts()), max_seq_len=20, fixed_length=20)
    b = data.sample_batch(8, torch.Generator().manual_seed(0))
    assert b["input_ids"].shape == (8, 20) and int(b["attention_mask"].sum(1).max()) < 20
    # maskable tokens per sequence: A + B words, for the true B or the other pair's B (both NSP outcomes)
    lens = [len(a.split()) + len(bb.split()) for a, _ in corpus.pairs for _, bb in corpus.pairs]
    expected = expected_selection_rate(lens, 0.15)
    assert expected > 0.16  # 1 of 5-6 tokens: the at-least-one rule, not 15%
    measured = masking_stats(data, draws=4000, seed=1)["selected_rate"]
    assert abs(measured - expected) < 0.01
    assert "at least one" in masking_rule() and "max(1, round(n x 0.15))" in masking_rule()
    with pytest.raises(Exception, match="fixed_length"):
        PretrainingData(corpus, WordTokenizer.build(corpus.texts()), max_seq_len=20, fixed_length=10)


def test_cli_presets_json_lists_five_pairwise_different_configs(capsys):
    import json

    from bertcore.cli import main

    assert main(["presets", "--json", "--size", "tiny"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in out] == list(PRESETS)
    bert = [json.dumps(p["bert"], sort_keys=True) for p in out]
    assert len(set(bert)) == 5 and all(BertConfig(**p["bert"]) for p in out)
    with pytest.raises(SystemExit) as e:
        main(["presets", "--size", "huge"])
    assert e.value.code == 2


def test_pad_to_pads_every_training_batch_like_bert_pytorch():
    """TrainConfig.pad_to: BERT-pytorch pads every example to seq_len (20 in seed 003), the codertimo preset at
    seed size does the same; 0 pads each batch to its longest pair."""
    from bertcore.config import TrainConfig, check_compatible
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.training.trainer import Trainer

    assert preset("BERT-pytorch (codertimo)", "paper")[1]["pad_to"] == 20
    corpus = builtin_corpus(seed=0, n_pairs=200)
    tok = WordTokenizer.build(corpus.texts())
    bcfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                      **{k: v for k, v in preset("BERT-pytorch (codertimo)", "tiny")[0].items()
                         if k not in ("hidden_size", "num_attention_heads", "intermediate_size")})
    widths = {}
    for pad_to in (0, 40):
        tc = TrainConfig(steps=2, batch_size=4, max_seq_len=24, pad_to=pad_to, eval_every=0, eval_size=8,
                         snapshot_every=0)
        t = Trainer(bcfg, tc, corpus, tok)
        b = t.data.sample_batch(4, torch.Generator().manual_seed(0))
        widths[pad_to] = b["input_ids"].shape[1]
        t.run()
        assert t.history.frame()["mlm_loss"].notna().all()
    assert widths[40] == 40 and widths[0] <= 24
    with pytest.raises(ConfigError, match="pad_to=10 is shorter than max_seq_len=24"):
        TrainConfig(max_seq_len=24, pad_to=10)
    with pytest.raises(ConfigError, match="pad_to=100 exceeds max_position_embeddings=64"):
        check_compatible(BertConfig(vocab_size=100), TrainConfig(pad_to=100))
