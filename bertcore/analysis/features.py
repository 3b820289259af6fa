"""Each feature of an SAE read three ways: where it fires, what the grammar calls it, what it does to the output.

* **Contexts**: the evaluation tokens where it fires most (their sequences, with its activation at every token)
  and a histogram of its non-zero activations.
* **Name**: every label of ``bertcore.data.token_labels`` (word class, number, gender, topic, sentence A/B,
  [CLS]/[SEP]/[MASK], position; for an upload the word and the position) is scored as a detector of the feature:
  AUROC of the feature's activation against the label over all evaluation tokens (the probability that a token
  with the label gets a higher activation than one without, ties counted half), and precision and recall of
  "the feature fires" (activation > 0). The label with the highest AUROC names the feature; below
  ``NO_LABEL_AUROC`` (or for a feature that never fires) it gets no label. Labels with fewer than
  ``MIN_POSITIVES`` tokens are not scored.
* **Output**: the feature's decoder direction, scaled to its largest activation, is added at its site
  (``Tap(edit=...)``) at every token of a sample of evaluation sequences; the words whose MLM logit rises most on
  average are the ones it promotes, those that fall most the ones it suppresses. A model without an MLM head has
  no output words (``NO_MLM_HEAD``).
"""
from __future__ import annotations

import numpy as np
import torch

from bertcore.analysis.lens import NO_MLM_HEAD, has_mlm_head
from bertcore.model.sae import SparseAutoencoder
from bertcore.analysis.sae_data import Activations
from bertcore.model.modes import eval_mode
from bertcore.model.tap import Tap

NO_LABEL_AUROC = 0.8
MIN_POSITIVES = 5
MAX_WORD_LABELS = 300
TOP_CONTEXTS = 8
TOP_WORDS = 8
HIST_BINS = 20
OUTPUT_SAMPLE = 16  # evaluation sequences the output effect is measured on
FEATURES_VERSION = 1
FAMILY_ORDER = {"special": 0, "number": 1, "topic": 2, "topic_word": 3, "gender": 4, "class": 5, "sentence": 6,
                "word": 7, "position": 8}  # ties in AUROC go to the earlier family


def label_matrix(acts: Activations) -> tuple[list[str], np.ndarray]:
    """The labels (``family:value``) with at least ``MIN_POSITIVES`` tokens and the (N, L) bool matrix of which
    evaluation token has which label, in the order of ``acts``'s tokens."""
    ts = acts.tokens
    flat = [f for facts in ts.facts for f in facts]
    counts: dict[str, int] = {}
    for f in flat:
        for lb in f:
            counts[lb] = counts.get(lb, 0) + 1
    names = [n for n, c in counts.items() if c >= MIN_POSITIVES and len(flat) - c >= MIN_POSITIVES]
    words = sorted((n for n in names if n.startswith("word:")), key=lambda n: -counts[n])[:MAX_WORD_LABELS]
    names = sorted([n for n in names if not n.startswith("word:")] + words, key=_label_key)
    col = {n: j for j, n in enumerate(names)}
    m = np.zeros((len(flat), len(names)), dtype=bool)
    for i, f in enumerate(flat):
        for lb in f:
            j = col.get(lb)
            if j is not None:
                m[i, j] = True
    return names, m


def _label_key(name: str):
    fam, _, val = name.partition(":")
    return (FAMILY_ORDER.get(fam, 9), int(val) if fam == "position" and val.isdigit() else 0, val)


def label_scores(f: np.ndarray, m: np.ndarray) -> dict[str, np.ndarray]:
    """AUROC, precision and recall of every (feature, label): ``f`` (N, F) activations, ``m`` (N, L) labels.
    AUROC by the rank-sum (Mann-Whitney U) formula with average ranks for ties."""
    n = f.shape[0]
    ranks = average_ranks(f)  # (N, F)
    mf = m.astype(np.float64)
    n_pos = mf.sum(0)  # (L,)
    n_neg = n - n_pos
    rank_sum = ranks.T @ mf  # (F, L)
    auroc = (rank_sum - n_pos * (n_pos + 1) / 2) / np.maximum(n_pos * n_neg, 1)
    fires = (f > 0).astype(np.float64)
    tp = fires.T @ mf  # (F, L)
    n_fire = fires.sum(0)[:, None]
    precision = np.divide(tp, n_fire, out=np.zeros_like(tp), where=n_fire > 0)
    recall = tp / np.maximum(n_pos, 1)
    return {"auroc": auroc, "precision": precision, "recall": recall}


def average_ranks(f: np.ndarray) -> np.ndarray:
    """Per column, the 1-based rank of each value, tied values sharing their average rank (float64)."""
    out = np.empty(f.shape, dtype=np.float64)
    for j in range(f.shape[1]):
        _, inv, counts = np.unique(f[:, j], return_inverse=True, return_counts=True)
        ends = np.cumsum(counts)
        out[:, j] = (ends - (counts - 1) / 2.0)[inv]
    return out


def best_labels(names: list[str], scores: dict, frequency: np.ndarray) -> list[dict]:
    """Per feature: the label with the highest AUROC (earlier family on a tie), or None below NO_LABEL_AUROC."""
    auroc = scores["auroc"]
    order = np.array([_label_key(n)[0] for n in names])
    out = []
    for i in range(auroc.shape[0]):
        if not len(names) or frequency[i] == 0:
            out.append({"label": None, "auroc": None, "precision": None, "recall": None})
            continue
        top = auroc[i].max()
        j = int(np.flatnonzero(np.isclose(auroc[i], top, atol=1e-9))[np.argmin(order[np.isclose(auroc[i], top,
                                                                                           atol=1e-9)])])
        good = top >= NO_LABEL_AUROC
        out.append({"label": names[j] if good else None, "auroc": round(float(top), 6),
                    "precision": round(float(scores["precision"][i, j]), 6),
                    "recall": round(float(scores["recall"][i, j]), 6), "best_guess": names[j]})
    return out


def top_contexts(f: np.ndarray, acts: Activations, n: int = TOP_CONTEXTS) -> list[list[dict]]:
    """Per feature: the ``n`` tokens (one per sequence) where it fires most: {"seq", "position", "activation"}."""
    seq = acts.seq.numpy()
    pos = acts.pos.numpy()
    out = []
    for i in range(f.shape[1]):
        col = f[:, i]
        order = np.argsort(-col, kind="stable")
        picked, seen = [], set()
        for t in order[: 50 * n]:
            if col[t] <= 0 or len(picked) >= n:
                break
            if seq[t] in seen:
                continue
            seen.add(seq[t])
            picked.append({"seq": int(seq[t]), "position": int(pos[t]), "activation": round(float(col[t]), 5)})
        out.append(picked)
    return out


def histograms(f: np.ndarray, bins: int = HIST_BINS) -> list[dict]:
    """Per feature: counts of its non-zero activations in ``bins`` equal bins from 0 to its maximum."""
    out = []
    for i in range(f.shape[1]):
        v = f[:, i][f[:, i] > 0]
        if not len(v):
            out.append({"edges": [], "counts": [], "zeros": int(f.shape[0])})
            continue
        counts, edges = np.histogram(v, bins=bins, range=(0.0, float(v.max())))
        out.append({"edges": [round(float(e), 5) for e in edges], "counts": counts.tolist(),
                    "zeros": int(f.shape[0] - len(v))})
    return out


def output_effects(model, sae: SparseAutoencoder, acts: Activations, scale: np.ndarray,
                   chunk: int = 16) -> np.ndarray | None:
    """(F, V): the mean change of the MLM logits over the tokens of ``OUTPUT_SAMPLE`` evaluation sequences (of one
    length) when ``scale[i] · W_dec[i]`` is added at the SAE's site at every token; None without an MLM head."""
    if not has_mlm_head(model):
        return None
    ts = acts.tokens
    lengths = [len(s) for s in ts.sequences]
    common = max(set(lengths), key=lambda n: (lengths.count(n), -n))
    rows = [i for i, s in enumerate(ts.sequences) if len(s) == common][:OUTPUT_SAMPLE]
    x = torch.tensor([ts.sequences[i] for i in rows], dtype=torch.long)
    t = torch.tensor([ts.types[i] for i in rows], dtype=torch.long)
    hook = acts.hook
    out = np.zeros((sae.d_sae, model.config.vocab_size), dtype=np.float32)
    with eval_mode(model):
        clean = model(x, token_type_ids=t, attention_mask=torch.ones_like(x), tap=Tap()).mlm_logits.float()
        base = clean.mean((0, 1))
        for s in range(0, sae.d_sae, chunk):
            ids = list(range(s, min(s + chunk, sae.d_sae)))
            vec = sae.W_dec[ids] * torch.as_tensor(scale[ids], dtype=torch.float32)[:, None]  # (c, width)
            vec = vec.repeat_interleave(len(rows), 0)  # (c * S, width): one feature per block of rows
            xb, tb = x.repeat(len(ids), 1), t.repeat(len(ids), 1)
            tap = Tap(edit={hook: lambda h, v=vec: h + v[:, None, :].to(h.dtype)})
            logits = model(xb, token_type_ids=tb, attention_mask=torch.ones_like(xb), tap=tap).mlm_logits.float()
            out[ids] = (logits.view(len(ids), len(rows), common, -1).mean((1, 2)) - base).numpy()
    return out


def output_words(effect: np.ndarray | None, tokenizer, n: int = TOP_WORDS) -> tuple[list, list]:
    """Per feature: [(token, Δlogit)] it promotes most and suppresses most (special tokens left out)."""
    special = set(getattr(tokenizer, "special_ids", ()))
    keep = np.array([i for i in range(effect.shape[1]) if i not in special])
    toks = tokenizer.convert_ids_to_tokens(keep.tolist())
    prom, supp = [], []
    for row in effect[:, keep]:
        order = np.argsort(-row, kind="stable")
        prom.append([[toks[j], round(float(row[j]), 4)] for j in order[:n]])
        supp.append([[toks[j], round(float(row[j]), 4)] for j in order[::-1][:n]])
    return prom, supp


def feature_table(model, tokenizer, sae: SparseAutoencoder, acts: Activations) -> tuple[dict, np.ndarray | None]:
    """Everything the CLI's ``features`` and the page show, JSON-ready (written to the SAE folder's features.json):
    ``labels`` (the label names scored), ``sequences`` (the evaluation sequences as tokens, which the contexts
    index), and per feature its label and scores, frequency, largest and mean activation, contexts with the
    activations of the whole sequence, histogram, and promoted / suppressed words. Also returns the (F, V) output
    effects (None without an MLM head)."""
    with torch.no_grad():
        f = sae.encode(acts.x).numpy()
    names, m = label_matrix(acts)
    frequency = (f > 0).mean(0)
    scores = label_scores(f, m)
    named = best_labels(names, scores, frequency)
    hist = histograms(f)
    ctx = top_contexts(f, acts)
    max_act = f.max(0)
    mean_act = np.divide(f.sum(0), (f > 0).sum(0), out=np.zeros(f.shape[1], dtype=np.float64), where=(f > 0).any(0))
    effect = output_effects(model, sae, acts, max_act.astype(np.float32))
    prom, supp = output_words(effect, tokenizer) if effect is not None else ([], [])
    starts = np.concatenate([[0], np.cumsum([len(s) for s in acts.tokens.sequences])])
    used = sorted({c["seq"] for cs in ctx for c in cs})
    features = []
    for i in range(sae.d_sae):
        contexts = [{**c, "activations": [round(float(v), 4) for v in f[starts[c["seq"]]:starts[c["seq"] + 1], i]]}
                    for c in ctx[i]]
        features.append({"id": i, **named[i], "frequency": round(float(frequency[i]), 6),
                         "max_activation": round(float(max_act[i]), 5), "mean_activation": round(float(mean_act[i]), 5),
                         "top_contexts": contexts, "histogram": hist[i],
                         "promotes": prom[i] if prom else [], "suppresses": supp[i] if supp else []})
    return {"version": FEATURES_VERSION, "hook": acts.hook, "labels": names, "grammar": acts.tokens.grammar,
            "n_tokens": int(f.shape[0]), "no_label_auroc": NO_LABEL_AUROC, "families": family_best(names, scores),
            "output_note": None if effect is not None else str(NO_MLM_HEAD),
            "sequences": {str(s): tokenizer.convert_ids_to_tokens(acts.tokens.sequences[s]) for s in used},
            "features": features}, effect


FAMILY_GROUPS = {"number": ("number:",), "topic": ("topic:", "topic_word:"), "mask": ("special:[MASK]",)}


def family_best(names: list[str], scores: dict) -> dict[str, dict | None]:
    """For the over-training view: per group of labels (number, topic, [MASK]) the (feature, label) with the
    highest AUROC: {"id", "label", "auroc", "precision", "recall"}, or None when the group has no label here."""
    auroc = scores["auroc"]
    out = {}
    for key, prefixes in FAMILY_GROUPS.items():
        cols = [j for j, n in enumerate(names) if n.startswith(prefixes)]
        if not cols or not auroc.shape[0]:
            out[key] = None
            continue
        sub = auroc[:, cols]
        i, jj = np.unravel_index(int(np.argmax(sub)), sub.shape)
        j = cols[jj]
        out[key] = {"id": int(i), "label": names[j], "auroc": round(float(auroc[i, j]), 6),
                    "precision": round(float(scores["precision"][i, j]), 6),
                    "recall": round(float(scores["recall"][i, j]), 6)}
    return out
