"""Skills with known answers (issue 23 part 1-3, 6): the items, the rule P(right) > P(wrong), the known-answer
models, what a run writes, and the CLI."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertcore.analysis.inference import encode_pair, fill_mask, nsp_probability
from bertcore.analysis.skills import SkillSuite, first_passes
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.pretraining import pad_batch
from bertcore.data.skill_items import (CHANCE, SKILLS, SkillItem, TrainingText, builtin_items, parse_skill_csv,
                                       read_items_jsonl)
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.model.bert import init_model
from bertcore.launch import service

MAX_LEN = 64


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0)


@pytest.fixture(scope="module")
def items(corpus):
    return builtin_items(corpus)


@pytest.fixture(scope="module")
def tok(corpus):
    return WordTokenizer.build(corpus.texts())


@pytest.fixture(scope="module")
def suite(items, tok):
    return SkillSuite(items, tok, MAX_LEN)


def test_at_least_200_held_out_items_per_skill_each_a_minimal_pair(items, corpus, suite):
    by = {k: [it for it in items if it.skill == k] for k in SKILLS}
    assert len(SKILLS) >= 6 and CHANCE == 0.5
    for k, its in by.items():
        assert len(its) >= 200, (k, len(its))
        for it in its:
            assert it.right != it.wrong
            if not it.is_nsp:
                masked = it.text if it.text_b is None else it.text_b
                assert masked.count("[MASK]") == 1 and (it.text_b is None or "[MASK]" not in it.text)
    seen = TrainingText(corpus)
    assert not any(seen.holds(it) for it in items)  # none equals a training sentence or pair
    sentences = {s.lower().replace(" ", "") for s in corpus.sentences()}
    for it in items:  # the same check, written out for the MLM items
        if not it.is_nsp:
            filled = (it.text if it.text_b is None else it.text_b).replace("[MASK]", it.right)
            assert filled.lower().replace(" ", "") not in sentences or it.text_b is not None
    assert suite.skipped == {} and len(suite.items) == len(items)  # every item is scorable by the run's vocabulary


def test_same_seed_same_items_and_answers_balanced(items, corpus):
    again = builtin_items(corpus)
    assert [it.to_json() for it in again] == [it.to_json() for it in items]
    other = builtin_items(corpus, seed=7)
    assert [it.to_json() for it in other] != [it.to_json() for it in items]
    for k in ("article_a_an", "pronoun_gender"):  # a model that always says "a" (or "he") scores chance
        rights = [it.right for it in items if it.skill == k]
        counts = {w: rights.count(w) for w in set(rights)}
        assert len(counts) == 2 and max(counts.values()) == min(counts.values()), (k, counts)


class Oracle(torch.nn.Module):
    """A hand-set "model" that knows every item's answer: it gives the right word (or the true B) the larger
    logit, or with ``wrong=True`` the wrong one. Its inputs are looked up by their token ids, encoded as fill-mask
    and P(IsNext) encode them (inference.encode_pair), so it also checks that the scorer feeds those sequences."""

    def __init__(self, items, tok, vocab: int, wrong: bool = False):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.mlm, self.nsp = vocab, {}, {}
        for it in items:
            if it.is_nsp:
                for b, is_true in ((it.right, True), (it.wrong, False)):
                    ids, _, _ = encode_pair(tok, it.text, b, MAX_LEN)
                    self.nsp[tuple(ids)] = is_true != wrong
            else:
                ids, _, _ = encode_pair(tok, it.text, it.text_b, MAX_LEN)
                good, bad = tok.encode(it.right)[0], tok.encode(it.wrong)[0]
                self.mlm.setdefault(tuple(ids), set()).add(bad if wrong else good)  # a text can have several items

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, mlm_labels=None):
        """As BertForPreTraining.forward with ``mlm_labels``: MLM logits (N, V) for the selected positions only,
        in (sequence, position) order."""
        B, T = input_ids.shape
        mlm = torch.zeros(B, T, self.vocab)
        nsp = torch.zeros(B, 2)
        for i in range(B):
            key = tuple(int(x) for x, m in zip(input_ids[i], attention_mask[i]) if m)
            if key in self.mlm:
                mlm[i, :, sorted(self.mlm[key])] = 5.0
            else:
                nsp[i, 0] = 5.0 if self.nsp[key] else -5.0
        return SimpleNamespace(mlm_logits=mlm[mlm_labels != -100], nsp_logits=nsp)


def test_no_text_has_a_word_that_is_right_in_one_item_and_wrong_in_another(items):
    right, wrong = {}, {}
    for it in items:
        if not it.is_nsp:
            right.setdefault((it.text, it.text_b), set()).add(it.right)
            wrong.setdefault((it.text, it.text_b), set()).add(it.wrong)
    assert not [k for k in right if right[k] & wrong[k]]


def test_a_model_that_knows_the_answers_scores_one_and_its_opposite_zero(items, tok, suite):
    right = suite.score(Oracle(items, tok, tok.vocab_size))
    assert set(right) == set(SKILLS) and all(v == 1.0 for v in right.values()), right
    wrong = suite.score(Oracle(items, tok, tok.vocab_size, wrong=True))
    assert all(v == 0.0 for v in wrong.values()), wrong


def test_a_decoder_bias_for_one_word_decides_a_users_items(tok):
    """A real model, hand-set: a large MLM decoder bias on "is" makes it prefer "is" everywhere."""
    model = init_model(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=64), seed=0)
    csv = "text,right,wrong\nthe cow [MASK] hungry .,is,are\nthe cows [MASK] hungry .,are,is\n"
    own = SkillSuite(parse_skill_csv(csv, "agree.csv", tok), tok, MAX_LEN)
    bias = dict(model.named_parameters())["cls.predictions.bias"]
    with torch.no_grad():
        bias[tok.encode("is")[0]] = 1e3
    m = own.margins(model)
    assert m[0] > 0 > m[1] and own.score(model) == {"own:agree": 0.5}


def _logit_diff(model, tok, it):
    """logit(right) - logit(wrong) at the [MASK], one item at a time, through fill-mask's encoding."""
    ids, types, _ = encode_pair(tok, it.text, it.text_b, MAX_LEN)
    b = pad_batch([ids], [types], tok.pad_id)
    with torch.no_grad():
        out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
    at = ids.index(tok.mask_id)
    lg = out.mlm_logits[0, at]
    return float(lg[tok.encode(it.right)[0]] - lg[tok.encode(it.wrong)[0]])


def test_pass_equals_p_right_above_p_wrong_from_fill_mask_and_nsp(items, tok, suite):
    model = init_model(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64), seed=1).eval()
    margins = suite.margins(model)
    checked = {"fill": 0, "pair": 0, "nsp": 0}
    for it, m in list(zip(suite.items, margins))[::7]:
        if it.is_nsp:
            d = nsp_probability(model, tok, it.text, it.right, MAX_LEN) - nsp_probability(model, tok, it.text,
                                                                                              it.wrong, MAX_LEN)
            checked["nsp"] += 1
        elif it.text_b is None:
            r = fill_mask(model, tok, it.text, top_k=tok.vocab_size, max_len=MAX_LEN)
            probs = dict(r.masks[0].candidates)
            d = np.log(probs[it.right]) - np.log(probs[it.wrong])
            checked["fill"] += 1
        else:
            d = _logit_diff(model, tok, it)
            checked["pair"] += 1
        assert d == pytest.approx(m, abs=1e-4), it
        if abs(d) > 1e-4:
            assert (d > 0) == (m > 0)
    assert min(checked.values()) >= 10, checked


@pytest.mark.parametrize("csv,words", [
    ("text,right,wrong\nthe cow is hungry .,is,are\n", ["0 [MASK]", "exactly one"]),
    ("text,right,wrong\nthe [MASK] [MASK] hungry .,is,are\n", ["2 [MASK]", "exactly one"]),
    ("text,right,wrong\nthe cow [MASK] hungry .,zyzzyva,are\n", ["zyzzyva", "not one token", "vocabulary"]),
    ("text,right,wrong\nthe cow [MASK] hungry .,,are\n", ["right field is empty", "fill it in"]),
    ("text,right,wrong\nthe cow [MASK] hungry .,is,is\n", ["same word"]),
    ("sentence,answer\nthe cow [MASK] .,is\n", ["header", "text,right,wrong"]),
    ("text,right,wrong\nthe cow [MASK] hungry .,is\n", ["2 fields", "quote"]),
    ("text,right,wrong\n", ["no items"]),
])
def test_bad_skill_files_say_what_to_fix(tok, csv, words):
    with pytest.raises(InputError) as e:
        parse_skill_csv(csv, "mine.csv", tok)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_bytes_too_big_or_not_utf8(tok):
    with pytest.raises(InputError, match="not UTF-8"):
        parse_skill_csv("text,right,wrong\nla vache [MASK] .,est,sont\n".encode("utf-16"), "m.csv", tok)
    with pytest.raises(InputError, match="at most .* bytes: split it"):
        parse_skill_csv(b"text,right,wrong\n" + b"x" * (3 * 1024 * 1024), "m.csv", tok)


def test_first_passes_reports_the_first_step_at_each_level():
    rows = [{"step": 0, "a": 0.5}, {"step": 50, "a": 0.8}, {"step": 100, "a": 0.95}, {"step": 150, "a": 0.7}]
    fp = first_passes(rows, ["a"], seconds={0: 0.0, 50: 3.0, 100: 6.5, 150: 9.0})
    assert [(d["level"], d["step"], d["seconds"]) for d in fp] == [(0.75, 50, 3.0), (0.9, 100, 6.5)]


def _spec(steps=8, **kw):
    bert = BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2,
                      max_position_embeddings=MAX_LEN)
    tc = TrainConfig(**{**dict(steps=steps, batch_size=8, eval_every=4, eval_size=16, max_seq_len=MAX_LEN,
                               warmup_steps=2, seed=3), **kw})
    return service.RunSpec(bert, tc, corpus="builtin", name="skills", probe=None)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("skills") / "run"
    service.train(_spec(), d)
    return d


def test_a_run_writes_skills_at_every_evaluation_and_the_items(run_dir):
    lines = (run_dir / service.SKILLS_FILE).read_text().splitlines()
    head = lines[0].split(",")
    assert head[:2] == ["step", "seconds"] and set(head[2:]) == set(SKILLS)
    assert [int(float(r.split(",")[0])) for r in lines[1:]] == [0, 4, 8]
    items = read_items_jsonl((run_dir / service.SKILL_ITEMS_FILE).read_text(encoding="utf-8"))
    assert len(items) >= 200 * len(SKILLS) and all(isinstance(it, SkillItem) for it in items)


def test_cli_recomputes_the_runs_numbers(run_dir, capsys):
    from bertcore.cli import main

    assert main(["skills", str(run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {s["skill"] for s in out["skills"]} == set(SKILLS) and all(s["items"] >= 200 for s in out["skills"])
    last = (run_dir / service.SKILLS_FILE).read_text().splitlines()[-1].split(",")
    head = (run_dir / service.SKILLS_FILE).read_text().splitlines()[0].split(",")
    recorded = dict(zip(head, last))
    for k, v in out["scores"][0].items():
        if k != "step":
            assert v == pytest.approx(float(recorded[k]), abs=1e-9), k
    assert main(["skills", str(run_dir), "--all-steps", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in out["scores"]] == [0, 4, 8]


def test_cli_refuses_bad_items_and_skills_with_data(run_dir, tmp_path, capsys):
    from bertcore.cli import main

    bad = tmp_path / "bad.csv"
    bad.write_text("text,right,wrong\nno mask here .,is,are\n", encoding="utf-8")
    assert main(["skills", str(run_dir), "--items", str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(r"line 2 has 0 \[MASK\]", err)
    good = tmp_path / "own.csv"
    good.write_text("text,right,wrong\nthe cow [MASK] hungry .,is,are\n", encoding="utf-8")
    assert main(["train", "--data", str(tmp_path), "--skills", str(good)]) == 2
    assert "--skills" in capsys.readouterr().err


def test_resume_truncates_skills_to_the_resumed_step(tmp_path):
    from bertcore.training.callbacks import Callbacks
    from bertcore.training.drive import StopSignal

    stop = StopSignal()
    spec = _spec(steps=12, snapshot_every=4)
    cb = Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == 6 else None)
    service.train(spec, tmp_path / "part", stop=stop, callbacks=cb)
    steps = [int(float(r.split(",")[0])) for r in (tmp_path / "part" / service.SKILLS_FILE).read_text().splitlines()[1:]]
    assert steps[-1] <= 6
    res = service.resume(tmp_path / "part")
    assert res.status == "finished"
    steps = [int(float(r.split(",")[0])) for r in (tmp_path / "part" / service.SKILLS_FILE).read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and steps[-1] == 12 and 8 in steps
