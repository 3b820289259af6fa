"""Fair comparisons (Compare designs): two variants start from the same initial weights wherever shapes match."""
import pytest
import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.model.bert import init_model
from bertcore.presets import PRESETS
from bertcore.training.same_init import same_init
from bertcore.training.trainer import Trainer


def cfg(**kw):
    return BertConfig(vocab_size=450, hidden_size=32, num_attention_heads=2, intermediate_size=64, **kw)


def test_same_design_shares_everything():
    a, b = init_model(cfg(), 0), init_model(cfg(), 7)
    assert not torch.equal(a.bert.embeddings.word_embeddings.weight, b.bert.embeddings.word_embeddings.weight)
    r = same_init(a, b)
    assert r.all_shared and r.own == []
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    assert "all" in r.summary()


def test_pre_vs_post_ln_shares_all_but_the_extra_layernorm():
    post, pre = init_model(cfg(), 0), init_model(cfg(norm_placement="pre"), 0)
    before = {n: p.clone() for n, p in pre.named_parameters()}
    r = same_init(post, pre)
    post_p = dict(post.named_parameters())
    for n, p in pre.named_parameters():
        if n in r.copied:
            assert torch.equal(p, post_p[n])
        else:
            assert torch.equal(p, before[n])  # kept its own init
    own = {n for n, _ in r.own}
    assert own and all("LayerNorm" in n for n in own)
    assert len(r.copied) == len(post_p) - sum(n not in dict(pre.named_parameters()) for n in post_p)
    assert "cannot be shared" in r.summary()


def test_whole_presets_can_be_compared():
    small = dict(vocab_size=450, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    a = init_model(BertConfig(**{**PRESETS["original BERT"][0], **small}), 3)
    b = init_model(BertConfig(**{**PRESETS["BERT-pytorch (codertimo)"][0], **small}), 3)
    r = same_init(a, b)
    assert r.copied and r.own  # encoder weights shared; heads and positions differ
    assert "bert.encoder.layer.0.attention.self.qkv.weight" in r.copied or any(
        ".attention." in n for n in r.copied)
    assert any("position_embeddings" in n for n, _ in r.own)


@pytest.mark.parametrize("switch", [{"hidden_act": "gelu"}, {"hidden_act": "relu"}])
def test_trainer_starts_from_the_prepared_model(switch):
    """With the same init, seed and data, the only difference left is the design: an identical design gives an
    identical loss curve; a different activation starts from the same weights but trains differently."""
    from bertcore.data.tokenization import WordTokenizer

    corpus = builtin_corpus(seed=0, n_pairs=400)
    tok = WordTokenizer.build(corpus.texts())
    cfg = lambda **kw: BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,  # noqa: E731
                                  intermediate_size=64, **kw)
    tc = TrainConfig(steps=6, batch_size=8, eval_every=3, eval_size=16, snapshot_every=0, warmup_steps=2,
                     max_seq_len=32, num_threads=1)
    ref = init_model(cfg(), 5)
    other = init_model(cfg(**switch), 11)
    same_init(ref, other)
    t1 = Trainer(cfg(), tc, corpus, tokenizer=tok, model=ref)
    t2 = Trainer(cfg(**switch), tc, corpus, tokenizer=tok, model=other)
    assert t1.model is ref and t2.model is other
    t1.run()
    t2.run()
    same = t1.history.frame()["mlm_loss"].tolist() == t2.history.frame()["mlm_loss"].tolist()
    assert same == (switch["hidden_act"] == "gelu")


def test_compare_designs_starts_b_from_a_through_the_study_runner():
    """Compare designs' same start is the study runner's (bertcore.launch.study.initial_model): a switch that changes
    the tensors (pre-LN's final LayerNorm) shares every other tensor with A; a switch that keeps the shapes shares all
    from the seed alone; presets whose init schemes differ keep their own, presets with the same scheme share."""
    from bertcore.launch.study import initial_model
    from bertcore.lab.studies import Study, Variant

    def study(a: dict, b: dict) -> Study:
        return Study("compare-designs", "t", "s", (Variant("A", a), Variant("B", b)), "A",
                     base={"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64})

    s = study({"norm_placement": "post"}, {"norm_placement": "pre"})
    a, none = initial_model(s, "A", 3, 450)
    b, report = initial_model(s, "B", 3, 450)
    assert none is None and report is not None and not report.all_shared
    assert {n for n, _ in report.own} == {"bert.encoder.LayerNorm.weight", "bert.encoder.LayerNorm.bias"}
    pa = dict(a.named_parameters())
    for n, p in b.named_parameters():  # B's own LayerNorm is the only tensor A lacks
        assert (n in pa and torch.equal(p, pa[n])) == (n in report.copied), n
    s = study({"hidden_act": "gelu"}, {"hidden_act": "relu"})
    (a, _), (b, report) = initial_model(s, "A", 3, 450), initial_model(s, "B", 3, 450)
    assert report is None and all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    small = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    s = study({**PRESETS["original BERT"][0], **small}, {**PRESETS["BERT-pytorch (codertimo)"][0], **small})
    b, report = initial_model(s, "B", 3, 450)  # init "bert" vs "pytorch": the scheme is part of the design
    assert report is None
    own = init_model(BertConfig(vocab_size=450, **{**PRESETS["BERT-pytorch (codertimo)"][0], **small}), 3)
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), own.parameters()))  # nothing copied from A
    s = study({**PRESETS["BERT-pytorch (codertimo)"][0], **small}, {**PRESETS["blog BertModel"][0], **small})
    b, report = initial_model(s, "B", 3, 450)  # both "pytorch": shared wherever the shapes match
    assert report is not None and report.copied and report.own
