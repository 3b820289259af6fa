"""Each variant scored the way the papers scored theirs, from its run directory (BERT §5.1, Table 8; ALBERT §4.6).

* Masked-token accuracy on the run's held-out pairs with one rule for every variant: 15% of the tokens selected
  and every one replaced by [MASK], fixed draws (so a variant trained without [MASK] is scored as it is used). A
  left-to-right model fills no [MASK]: its next-token accuracy is reported instead, in a column of its own.
* The sentence head on both kinds of held-out pairs, NSP (random B) and SOP (swapped), whatever it was trained on:
  ALBERT's cross-evaluation. Label 0 means "a true continuation, in order" for both.
* Fine-tuning (the route of ``bertcore.finetune``) on the built-in tasks: same_topic (sentence pairs) and coherence
  (single sentences), like the paper's GLUE columns.
* Feature-based (Table 8's third column): the encoder frozen, a linear probe of each word's sentence topic
  (``context_topic``) on every layer's hidden states, the best layer reported.
* The skills the run scored at its last evaluation (``skills.csv``), mean share passed over the word skills; a
  left-to-right model's are scored by sentence likelihood (``SkillSuite``), so they get a column of their own.

``evaluate_run`` writes ``evaluation.json`` into the run directory (atomically) with the seconds each part took.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import time
from pathlib import Path

import pandas as pd
import torch

from bertcore.analysis.probing import fit_probe, hidden_states
from bertcore.data.pretraining import MaskingRates, PretrainingData
from bertcore.data.probe_sets import grammar_probe_set
from bertcore.data.skill_items import SKILLS
from bertcore.data.tasks import get_task
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.io.checkpoint import atomic_write, load_checkpoint
from bertcore.model.classification import BertForSequenceClassification
from bertcore.model.modes import eval_mode
from bertcore.training.run_corpus import run_corpus

EVALUATION_FILE = "evaluation.json"
EVAL_PAIRS = 1024  # held-out examples per accuracy
EVAL_SEED = 20190524  # the fixed draws of the common masked-token and sentence-pair batches
FINETUNES = {"ft_same_topic": ("same_topic", 16), "ft_coherence": ("coherence", 256)}  # metric: (task, labels)
FINETUNE_STEPS = 60  # as accurate as 100 steps on the default model (docs/LAB.md)
FEATURE_PROPERTY = "context_topic"


def _held_out(data: PretrainingData, rates: MaskingRates, sentence_task: str = "nsp", causal: bool = False):
    """The fixed held-out batches of ``data`` (the run's corpus, tokenized once) under another objective."""
    view = copy.copy(data)
    view.rates, view.sentence_task, view.causal = rates, sentence_task, causal
    return view.fixed_eval_batches(EVAL_PAIRS, EVAL_SEED, batch_size=256)


def _run_data(bundle, corpus) -> PretrainingData:
    """The run's pairs with its own split (same seed, same held-out pairs as while it trained)."""
    tc = bundle.train_config or {}
    return PretrainingData(corpus, bundle.tokenizer, int(tc.get("max_seq_len", 48)), seed=int(tc.get("seed", 0)),
                           held_out_frac=float(tc.get("held_out_frac", 0.05)))


@torch.no_grad()
def token_accuracy(model, batches: list[dict]) -> float:
    """Share of the labelled positions (masked tokens, or next tokens) whose top prediction is right."""
    hits = total = 0
    with eval_mode(model):
        for b in batches:
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                        mlm_labels=b["mlm_labels"])
            targets = b["mlm_labels"][out.mlm_positions]
            hits += int((out.mlm_logits.argmax(-1) == targets).sum())
            total += int(targets.numel())
    return hits / total if total else math.nan


@torch.no_grad()
def sentence_accuracy(model, batches: list[dict]) -> float:
    """Share of the pairs the sentence head labels right (0 = true continuation in order, 1 = not)."""
    ok = n = 0
    with eval_mode(model):
        for b in batches:
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
            ok += int((out.nsp_logits.argmax(-1) == b["nsp_labels"]).sum())
            n += len(b["nsp_labels"])
    return ok / n if n else math.nan


@functools.lru_cache(maxsize=4)
def _task(name: str):
    return get_task(name)  # built once per process: every run of a study fine-tunes on the same examples


def finetune_accuracy(model, tokenizer, task_name: str, labels: int, seed: int, steps: int = FINETUNE_STEPS) -> float:
    """Held-out accuracy after fine-tuning a copy of ``model``'s encoder (BERT §4.1) on a built-in task."""
    task = _task(task_name)
    clf = BertForSequenceClassification.from_pretraining(model, task.num_labels, task.labels, seed)
    tuner = FineTuner(clf, tokenizer, task, FinetuneConfig(steps=steps, labels=labels, seed=seed, eval_every=0))
    tuner.run()
    return float(tuner.eval_accuracy)


def feature_accuracy(model, tokenizer, seed: int = 0) -> tuple[float, int]:
    """(best held-out accuracy, its layer) of a linear probe of ``context_topic`` on the frozen encoder's layers
    (0 = the embeddings)."""
    ps = grammar_probe_set(tokenizer, FEATURE_PROPERTY, min(64, model.config.max_position_embeddings), seed)
    hidden = hidden_states(model, ps.sequences)
    test = ps.is_test()
    classes = sorted(set(ps.labels))
    y = torch.tensor([classes.index(v) for v in ps.labels])
    tr = torch.tensor([not t for t in test])
    feats = torch.stack([hidden[s][:, p] for s, p in ps.items], 1)  # (L+1, N, D)
    accs = [fit_probe(f[tr], y[tr], f[~tr], y[~tr], len(classes)) for f in feats]
    best = max(range(len(accs)), key=lambda k: accs[k])
    return accs[best], best


def final_skills(run_dir: Path) -> dict[str, float]:
    """The word skills' shares at the run's last evaluation (skills.csv), NSP skills left out."""
    path = Path(run_dir) / "skills.csv"
    if not path.is_file():
        return {}
    frame = pd.read_csv(path)
    if not len(frame):
        return {}
    last = frame.iloc[-1]
    return {k: float(last[k]) for k in frame.columns if k in SKILLS and not k.startswith("nsp") and pd.notna(last[k])}


def evaluate_run(run_dir: str | Path, seed: int | None = None) -> dict:
    """Every metric of ``bertcore.lab.studies.METRICS`` for the model in ``run_dir`` (None where it does not
    apply), written to ``run_dir/evaluation.json`` with the seconds each part took; returns that object."""
    d = Path(run_dir)
    t0 = time.perf_counter()
    bundle = load_checkpoint(d)
    model, tok = bundle.model, bundle.tokenizer
    tc = bundle.train_config or {}
    seed = int(tc.get("seed", 0)) if seed is None else int(seed)
    corpus = run_corpus(d)
    seconds: dict[str, float] = {}
    m: dict[str, float | None] = {k: None for k in ("mlm_acc", "next_token_acc", "nsp_acc", "sop_acc")}
    details: dict = {}
    if corpus is not None:
        data, causal = _run_data(bundle, corpus), model.config.causal
        if causal:
            m["next_token_acc"] = token_accuracy(model, _held_out(data, data.rates, causal=True))
        else:
            m["mlm_acc"] = token_accuracy(model, _held_out(data, MaskingRates(0.15, 1.0, 0.0)))
        if getattr(model, "has_nsp_head", True):
            keep = MaskingRates(0.15, 0.0, 0.0)  # selected tokens kept: the pairs go in unmasked
            for key, task in (("nsp_acc", "nsp"), ("sop_acc", "sop")):
                m[key] = sentence_accuracy(model, _held_out(data, keep, task, causal))
    seconds["held_out"] = time.perf_counter() - t0
    for key, (task, labels) in FINETUNES.items():
        t = time.perf_counter()
        m[key] = finetune_accuracy(model, tok, task, labels, seed)
        seconds[key] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        m["feature_topic"], details["feature_layer"] = feature_accuracy(model, tok, seed)
    except ValueError as e:  # a vocabulary that does not cover the grammar (an upload's): not measurable
        m["feature_topic"], details["feature_error"] = None, str(e)
    seconds["feature_topic"] = time.perf_counter() - t
    skills = final_skills(d)
    mean = sum(skills.values()) / len(skills) if skills else None
    m["skills"], m["skills_lm"] = (None, mean) if model.config.causal else (mean, None)  # two rules, two columns
    details["skills"] = skills
    out = {"format": 1, "metrics": {k: (None if v is None or not math.isfinite(v) else round(float(v), 6))
                                    for k, v in m.items()},
           "details": details, "seconds": {k: round(v, 3) for k, v in seconds.items()}}
    atomic_write(d / EVALUATION_FILE, json.dumps(out, indent=2) + "\n")
    return out


def record_finetune(run_dir: str | Path, accuracy: float, seconds: float) -> dict:
    """A fine-tune's score (its final held-out accuracy, from the run itself) as its evaluation.json."""
    acc = None if accuracy is None or not math.isfinite(accuracy) else round(float(accuracy), 6)
    out = {"format": 1, "metrics": {"accuracy": acc}, "details": {}, "seconds": {"finetune": round(seconds, 3)}}
    atomic_write(Path(run_dir) / EVALUATION_FILE, json.dumps(out, indent=2) + "\n")
    return out


def read_evaluation(run_dir: str | Path) -> dict | None:
    """evaluation.json of a run (None when missing or damaged)."""
    try:
        data = json.loads((Path(run_dir) / EVALUATION_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("metrics"), dict) else None
