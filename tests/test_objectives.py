"""The objective switches end to end (BERT Table 5's LTR, ALBERT's SOP, RoBERTa's no-NSP, whole-word and SpanBERT
masking): the causal mask in every layer and both attention paths, the measured masking shares and span lengths
against their settings, whole words kept whole, SOP's labels, the sentence task none in training and in a saved
checkpoint, the same pair order for every sentence task, skills by sentence likelihood, next-token inference, the
CLI, and shards refusing what they cannot do."""
import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from bertcore.analysis.inference import fill_mask, next_tokens, nsp_probability, predict, sentence_head_label
from bertcore.analysis.skills import SkillSuite
from bertcore.analysis.trace import trace
from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.masking_units import geometric_pmf
from bertcore.data.pretraining import MaskingRates, PretrainingData, masking_stats
from bertcore.data.skill_items import SkillItem
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer
from bertcore.errors import ConfigError, InputError
from bertcore.io.checkpoint import ModelBundle, load_checkpoint, save_checkpoint
from bertcore.launch.service import RunSpec, prepare
from bertcore.model.bert import BertForPreTraining
from bertcore.training.trainer import Trainer

SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=2000)


@pytest.fixture(scope="module")
def tok(corpus):
    return WordTokenizer.build(corpus.texts())


@pytest.fixture(scope="module")
def wordpiece(corpus):
    return WordPieceTokenizer.train(corpus.texts(), vocab_size=300)


def _model(tok, seed=0, **kw):
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, **SIZES, **kw)).eval()


@pytest.fixture(scope="module")
def ltr(tok):
    return _model(tok, attention_direction="left_to_right")


# ----------------------------------------------------------------------------- the causal mask
def test_left_to_right_trace_attention_is_zero_above_the_diagonal_in_every_layer(ltr, tok):
    for layer in range(ltr.config.num_hidden_layers):
        t = trace(ltr, tok, "the cat eats the fish .", "it sleeps near the stove .", layer=layer)
        probs = t.tensors[f"layer.{layer}.attention.probs"]  # (H, T, T)
        T = probs.shape[-1]
        upper = np.triu(np.ones((T, T), dtype=bool), 1)
        assert (probs[:, upper] == 0).all()
        assert (probs[:, ~upper] > 0).all()  # and every key on or left of the diagonal has weight
        assert np.allclose(probs.sum(-1), 1.0, atol=1e-5)
        assert probs[:, 0, 0] == pytest.approx(1.0)  # [CLS] sees only itself
        masked = t.tensors[f"layer.{layer}.attention.masked"]
        assert (masked[:, upper] <= np.finfo(np.float32).min).all()  # the masked scores: -inf above the diagonal


def test_bidirectional_trace_attends_to_the_right(tok):
    t = trace(_model(tok), tok, "the cat eats the fish .", layer=0)
    probs = t.tensors["layer.0.attention.probs"]
    assert np.triu(probs, 1).max() > 0.01


def test_readable_and_fast_attention_paths_agree_under_the_causal_mask(ltr, tok):
    """A padded batch: the fast path (scaled_dot_product_attention with the (B,1,T,T) mask) and the readable one
    (every step through the tap) give the same logits; and a left-to-right model's output at t ignores tokens > t."""
    rows = [tok.encode("the cat eats the fish near the barn ."), tok.encode("it sleeps .")]
    T = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_id] * (T - len(r)) for r in rows])
    att = (ids != tok.pad_id).long()
    with torch.no_grad():
        fast = ltr(ids, attention_mask=att).mlm_logits
        readable, cache = ltr.run_with_cache(ids, attention_mask=att)
    assert any(k.endswith("attention.scores") for k in cache)  # the readable path ran
    real = att.bool()
    assert torch.allclose(fast[real], readable.mlm_logits[real], atol=1e-5)
    changed = ids.clone()
    changed[0, 5:] = tok.token_to_id["dog"]
    with torch.no_grad():
        other = ltr(changed, attention_mask=att).mlm_logits
    assert torch.allclose(other[0, :5], fast[0, :5], atol=1e-6)  # left of the change: the same
    assert not torch.allclose(other[0, 5:8], fast[0, 5:8], atol=1e-4)


# ----------------------------------------------------------------------------- masking shares and units
@pytest.mark.parametrize("mask,rnd", [(0.8, 0.1), (1.0, 0.0), (0.0, 1.0), (0.8, 0.2)])  # MASK/SAME/RND 80/10/10 ...
def test_measured_action_shares_match_the_settings(corpus, tok, mask, rnd):
    rates = MaskingRates(0.15, mask, rnd)
    data = PretrainingData(corpus, tok, 48, rates, 0.5, 0.0, 3)
    s = masking_stats(data, 3000, seed=11)
    n = s["selected_rate"] * s["tokens_seen"]
    for key, p in (("mask_share", mask), ("random_share", rnd), ("keep_share", rates.keep_frac)):
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(s[key] - p) <= 4 * sd + 1e-12, (key, s[key], p, sd)
    assert abs(s["selected_rate"] - 0.15) < 4 * math.sqrt(0.15 * 0.85 / s["tokens_seen"]) + 0.002


def _drawn_spans(data, draws, seed):
    g, spans, left = torch.Generator().manual_seed(seed), {}, draws
    while left > 0:
        data.sample_batch_with_actions(min(512, left), g, stats=spans)
        left -= 512
    return spans


def test_span_lengths_follow_the_truncated_geometric(corpus, tok):
    data = PretrainingData(corpus, tok, 48, MaskingRates(unit="span"), 0.5, 0.0, 0)
    drawn = _drawn_spans(data, 3000, seed=5)["drawn"]
    pmf = np.array(geometric_pmf(0.2, 10))
    counts = np.bincount(drawn, minlength=11)[1:]
    assert counts.sum() == len(drawn) > 2000
    expected = pmf * len(drawn)
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert stat < chi2.ppf(0.999, df=9), (stat, counts, expected.round(1))
    mean, sd = float(np.mean(drawn)), float(np.sqrt((pmf * (np.arange(1, 11) - 3.797) ** 2).sum()))
    assert sum((k + 1) * p for k, p in enumerate(pmf)) == pytest.approx(3.797, abs=1e-3)  # SpanBERT's 3.8
    assert abs(mean - 3.797) < 4 * sd / math.sqrt(len(drawn))
    s = masking_stats(data, 1000, seed=2)  # the page's and the CLI's numbers: the same draws' shares
    again = np.array(_drawn_spans(data, 1000, 2)["drawn"])
    assert s["span_lengths"] == pytest.approx((np.bincount(again, minlength=11)[1:] / again.size).tolist())
    assert s["span_mean_drawn"] == pytest.approx(float(again.mean()))
    assert 1.0 <= s["span_mean_realised"] <= s["span_mean_drawn"]


def _words(tokens: list[str], special: set[str]) -> list[list[int]]:
    """Positions of each word, grouped independently of the library: a token and the ## pieces after it."""
    words: list[list[int]] = []
    for i, t in enumerate(tokens):
        if t in special:
            continue
        if t.startswith("##") and words and words[-1][-1] == i - 1:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def test_whole_word_selects_every_piece_of_a_word_together_and_nothing_else(corpus, wordpiece):
    data = PretrainingData(corpus, wordpiece, 48, MaskingRates(unit="whole_word"), 0.5, 0.0, 0)
    b = data.sample_batch_with_actions(400, torch.Generator().manual_seed(1))
    special = {wordpiece.vocab[i] for i in wordpiece.special_ids}
    split_words = 0
    for ids, acts in zip(b["original_ids"].tolist(), b["actions"].tolist()):
        tokens = wordpiece.convert_ids_to_tokens(ids)
        words = _words(tokens, special)
        in_word = {i for w in words for i in w}
        assert all(a == 0 for i, a in enumerate(acts) if i not in in_word)  # specials and padding: never selected
        for w in words:
            got = {acts[i] for i in w}
            assert len(got) == 1, (tokens, w, acts)  # all pieces selected or none, one action for the word
            split_words += len(w) > 1 and acts[w[0]] != 0
    assert split_words > 50  # the check saw many selected words of several pieces


@pytest.mark.parametrize("unit", ["token", "whole_word", "span"])
def test_selected_rate_stays_near_mlm_probability_for_each_unit(corpus, wordpiece, unit):
    data = PretrainingData(corpus, wordpiece, 48, MaskingRates(0.15, unit=unit), 0.5, 0.0, 0)
    s = masking_stats(data, 2000, seed=4)
    assert abs(s["selected_rate"] - 0.15) < 0.01, s["selected_rate"]


# ----------------------------------------------------------------------------- sentence tasks
def test_sop_label_one_is_the_true_pair_swapped_and_label_zero_in_order(corpus, tok):
    data = PretrainingData(corpus, tok, 128, MaskingRates(), 0.5, 0.0, 0, sentence_task="sop")
    b = data.sample_batch_with_actions(300, torch.Generator().manual_seed(2))
    labels = b["nsp_labels"].tolist()
    assert 100 < sum(labels) < 200  # about half swapped
    for ids, types, i, y in zip(b["original_ids"].tolist(), b["token_type_ids"].tolist(), b["pair_index"].tolist(),
                                labels):
        n = len(data.a_ids[i]) + len(data.b_ids[i]) + 3
        first = [t for t, s in zip(ids[:n], types[:n]) if s == 0][1:-1]
        second = [t for t, s in zip(ids[:n], types[:n]) if s == 1][:-1]
        want = (data.a_ids[i], data.b_ids[i]) if y == 0 else (data.b_ids[i], data.a_ids[i])
        assert (first, second) == (list(want[0]), list(want[1]))
    assert b["b_index"].tolist() == b["pair_index"].tolist()  # SOP never borrows another pair's sentence


def test_the_same_seed_gives_the_same_pair_order_for_every_sentence_task(corpus, tok):
    orders = {}
    for task in ("nsp", "sop", "none"):
        data = PretrainingData(corpus, tok, 48, MaskingRates(), 0.5, 0.1, 7, sentence_task=task)
        g = torch.Generator().manual_seed(9)
        orders[task] = [data.sample_batch_with_actions(16, g)["pair_index"].tolist() for _ in range(5)]
    assert orders["nsp"] == orders["sop"] == orders["none"]
    assert len({tuple(x) for x in orders["nsp"]}) == 5  # and the batches differ from each other


def test_sentence_task_none_trains_without_a_sentence_head_and_a_checkpoint_keeps_it(corpus, tok, tmp_path):
    tc = TrainConfig(steps=6, batch_size=8, warmup_steps=1, eval_every=3, eval_size=16, snapshot_every=0,
                     sentence_task="none")
    tr = Trainer(BertConfig(vocab_size=tok.vocab_size, **SIZES), tc, corpus, tokenizer=tok)
    tr.run()
    h = tr.history.frame()
    for col in ("nsp_loss", "nsp_acc", "eval_nsp_loss", "eval_nsp_acc"):
        assert h[col].isna().all(), col
    assert np.isfinite(h["mlm_loss"]).all() and np.isfinite(h["eval_mlm_loss"].dropna()).all()
    assert tr.model.has_nsp_head is False and tr.model.sentence_task == "none"
    save_checkpoint(ModelBundle(model=tr.model, tokenizer=tok, history=h, name="none", source="test"), tmp_path / "c")
    back = load_checkpoint(tmp_path / "c")
    assert back.model.has_nsp_head is False and back.model.sentence_task == "none"
    with pytest.raises(InputError, match="sentence_task=none"):
        nsp_probability(back.model, tok, "the cat eats .", "it sleeps .")
    assert predict(back.model, tok, "the cat eats .", "it sleeps .").p_is_next is None


def test_sop_checkpoint_names_its_head(corpus, tok, tmp_path):
    tc = TrainConfig(steps=2, batch_size=8, warmup_steps=1, eval_every=0, snapshot_every=0, sentence_task="sop")
    tr = Trainer(BertConfig(vocab_size=tok.vocab_size, **SIZES), tc, corpus, tokenizer=tok)
    tr.run()
    assert np.isfinite(tr.history.frame()["nsp_loss"]).all()
    save_checkpoint(ModelBundle(model=tr.model, tokenizer=tok, name="sop", source="test"), tmp_path / "c")
    back = load_checkpoint(tmp_path / "c")
    assert back.model.has_nsp_head and back.model.sentence_task == "sop"
    assert sentence_head_label(back.model) == "P(in order)" and sentence_head_label(_model(tok)) == "P(IsNext)"


def test_shards_refuse_the_new_objectives(tmp_path):
    for bert_kw, train_kw in (({}, {"sentence_task": "sop"}), ({}, {"sentence_task": "none"}),
                              ({}, {"masking_unit": "span"}), ({}, {"masking_unit": "whole_word"}),
                              ({"attention_direction": "left_to_right"}, {})):
        spec = RunSpec(BertConfig(**bert_kw), TrainConfig(**train_kw), data=tmp_path / "no-shards")
        with pytest.raises(ConfigError, match="--data"):
            prepare(spec)


# ----------------------------------------------------------------------------- skills and inference
def test_skills_score_a_left_to_right_model_by_sentence_likelihood(ltr, tok):
    item = SkillItem("own:test", "the dog [MASK] in the park .", "eats", "eat")
    suite = SkillSuite([item], tok, 48)
    assert len(suite.items) == 1
    (margin,) = suite.margins(ltr)

    def logp(sentence):  # by hand: the sum of log P(token t + 1 | tokens <= t) over the real words
        ids = [tok.cls_id, *tok.encode(sentence), tok.sep_id]
        with torch.no_grad():
            lp = torch.log_softmax(ltr(torch.tensor([ids])).mlm_logits[0], -1)
        return sum(float(lp[t, ids[t + 1]]) for t in range(len(ids) - 1) if ids[t + 1] not in tok.special_ids)

    want = logp("the dog eats in the park .") - logp("the dog eat in the park .")
    assert margin == pytest.approx(want, abs=1e-4)
    assert suite.score(ltr)["own:test"] == float(want > 0)


def test_fill_mask_refuses_a_left_to_right_model_and_next_tokens_predicts(ltr, tok):
    with pytest.raises(InputError, match="next_tokens"):
        fill_mask(ltr, tok, "the dog [MASK] in the park .")
    with pytest.raises(InputError, match="left-to-right"):
        predict(ltr, tok, "the dog [MASK] .", require_mask=True)
    r = next_tokens(ltr, tok, "the dog [MASK] in the park .", top_k=4)
    assert r.cut_at_mask and r.tokens == ["[CLS]", "the", "dog", "[SEP]"] and r.position == 2
    ids = [tok.cls_id, *tok.encode("the dog")]
    with torch.no_grad():  # the prefix alone, without the [SEP]: the causal mask makes them the same
        probs = torch.softmax(ltr(torch.tensor([ids])).mlm_logits[0, -1], -1)
    top = probs.topk(4)
    assert [t for t, _ in r.candidates] == tok.convert_ids_to_tokens(top.indices.tolist())
    assert [p for _, p in r.candidates] == pytest.approx(top.values.tolist(), abs=1e-6)
    assert next_tokens(ltr, tok, "the dog", top_k=4).candidates == pytest.approx(r.candidates)
    first = next_tokens(ltr, tok, "[MASK] dog", top_k=2)
    assert first.position == 0 and first.tokens == ["[CLS]", "[SEP]"]
    with pytest.raises(InputError, match="bidirectional"):
        next_tokens(_model(tok), tok, "the dog")


def test_a_left_to_right_sentence_head_reads_the_last_token(tok):
    m = _model(tok, attention_direction="left_to_right")
    m.sentence_task = "sop"
    p = nsp_probability(m, tok, "the cat eats .", "it sleeps .")
    ids = [tok.cls_id, *tok.encode("the cat eats ."), tok.sep_id, *tok.encode("it sleeps ."), tok.sep_id]
    types = [0] * (len(tok.encode("the cat eats .")) + 2) + [1] * (len(tok.encode("it sleeps .")) + 1)
    with torch.no_grad():
        h, _ = m.bert(torch.tensor([ids]), torch.tensor([types]))
        want = torch.softmax(m.cls.seq_relationship(m.bert.pooler(h[:, -1])), -1)[0, 0]
    assert p == pytest.approx(float(want), abs=1e-6)


# ----------------------------------------------------------------------------- CLI
def test_cli_mask_reports_span_statistics(capsys):
    assert main(["mask", "--corpus", "tutorial", "--draws", "400", "--set", "masking_unit=span", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["masking_unit"] == "span"
    assert r["span_expected"] == pytest.approx(geometric_pmf(0.2, 10))
    assert len(r["span_lengths"]) == 10 and sum(r["span_lengths"]) == pytest.approx(1.0)
    assert r["span_expected_mean"] == pytest.approx(3.797, abs=1e-3) and r["span_mean_drawn"] > 1
    assert main(["mask", "--corpus", "tutorial", "--draws", "200", "--set", "masking_unit=span",
                 "--set", "span_max_length=4"]) == 0
    out = capsys.readouterr().out
    assert "span lengths in words" in out and "geometric" in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "  0." in ln]) == 4


def test_cli_trace_of_a_left_to_right_run_is_causal_in_every_layer(ltr, tok, tmp_path, capsys):
    save_checkpoint(ModelBundle(model=ltr, tokenizer=tok, name="ltr", source="test"), tmp_path / "ltr")
    for layer in range(ltr.config.num_hidden_layers):
        assert main(["trace", str(tmp_path / "ltr"), "the cat eats the fish .", "it sleeps .", "--layer",
                     str(layer), "--json"]) == 0
        probs = np.array(json.loads(capsys.readouterr().out)["tensors"][f"layer.{layer}.attention.probs"]["values"])
        lower = np.tril(np.ones(probs.shape[-2:], dtype=bool))
        assert probs.ndim == 3 and np.triu(probs, 1).max() == 0.0 and probs[:, lower].min() > 0
    assert main(["trace", str(tmp_path / "ltr"), "the cat eats", "--layer", "1"]) == 0
    assert "note: a left-to-right model: the attention mask is causal" in capsys.readouterr().out
    assert main(["fill-mask", str(tmp_path / "ltr"), "the [MASK] eats"]) == 2
    assert "next_tokens" in capsys.readouterr().err
