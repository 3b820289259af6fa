"""Probing classifiers per layer (Alain & Bengio 2016) with control tasks (Hewitt & Liang 2019).

For each layer's hidden states (layer 0 = the embedding output, BERT §3 Fig. 2; layer l = encoder layer l) a
linear probe, multinomial logistic regression ``softmax(W h + b)``, is fit on the training items of a probe set
(``bertcore.data.probe_sets``) and scored on the held-out sentences. The features are standardised with the
training mean and std; the loss is cross-entropy + ``L2 * |W|^2``, minimised by L-BFGS from zero weights
(deterministic: no random start). Beside it the same probe is fit to the *control task* (Hewitt & Liang §3:
labels assigned to word types at random, seeded); selectivity = accuracy - control accuracy (§3.2). Chance is
the majority class of the training labels scored on the held-out labels.

``probe_over_steps`` probes every saved step of a run (``bertcore.io.steps``): a layer x step matrix. Results
are cached per (weights, property) in memory and in the derived-data cache (``bertcore.io.derived``: keyed by the
weights file's content, outside the run, so a viewer of a read-only link writes nothing into its owner's run).
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertcore.data.probe_sets import CSV_PROPERTY, ProbeSet, csv_probe_set, grammar_probe_set, labels_from_csv
from bertcore.errors import InputError
from bertcore.io import derived
from bertcore.io.checkpoint import load_checkpoint
from bertcore.io.steps import list_steps, load_step, step_path
from bertcore.message import Message
from bertcore.model.modes import eval_mode

L2 = 1e-2
MAX_ITER = 30
PROBE_VERSION = 2  # bump when the probe or the probe sets change: disk caches of older versions are recomputed
MAX_SEQ_TOKENS = 64
_MEMORY: OrderedDict = OrderedDict()
_MEMORY_MAX = 512


@dataclass
class LayerProbe:
    layer: int
    accuracy: float
    control_accuracy: float
    selectivity: float
    chance: float
    control_chance: float


@dataclass
class ProbeResult:
    """One model's probes of one property: a ``LayerProbe`` per layer (0 = embeddings)."""
    property: str
    layers: list[LayerProbe]
    n_train: int
    n_test: int
    classes: list[str]
    step: int | None = None
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ProbeResult:
        return cls(**{**d, "layers": [LayerProbe(**x) for x in d["layers"]]})


@dataclass
class ProbesOverSteps:
    """``results[k]`` probes step ``steps[k]``; the matrices are (layers, steps)."""
    property: str
    steps: list[int]
    results: list[ProbeResult] = field(default_factory=list)

    def matrix(self, what: str = "accuracy") -> np.ndarray:
        return np.array([[getattr(lp, what) for lp in r.layers] for r in self.results], dtype=float).T


# ----------------------------------------------------------------------------- the probe
def fit_probe(x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
              n_classes: int, l2: float = L2, max_iter: int = MAX_ITER) -> float:
    """Held-out accuracy of a multinomial logistic regression on x (N, D) -> y (N,) in [0, n_classes)."""
    if len(y_test) == 0:
        return float("nan")
    mu = x_train.mean(0)
    sd = x_train.std(0, unbiased=False).clamp_min(1e-6)
    xtr = (x_train - mu) / sd
    xte = (x_test - mu) / sd
    w = torch.zeros(xtr.shape[1], n_classes, requires_grad=True)  # (D, C)
    b = torch.zeros(n_classes, requires_grad=True)  # (C,)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=max_iter, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-6, tolerance_change=1e-9)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xtr @ w + b, y_train) + l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return float(((xte @ w + b).argmax(1) == y_test).float().mean())


def control_labels(labels: list[str], types: list[str], seed: int) -> list[str]:
    """Hewitt & Liang's control task: each type gets one label drawn from the empirical label distribution."""
    rng = random.Random(seed)
    table = {t: rng.choice(labels) for t in sorted(set(types))}
    return [table[t] for t in types]


def _chance(train: list[str], test: list[str]) -> float:
    if not test:
        return float("nan")
    top = max(sorted(set(train)), key=train.count)
    return sum(y == top for y in test) / len(test)


@torch.inference_mode()
def hidden_states(model, sequences: list[list[int]], batch: int = 256) -> list[torch.Tensor]:
    """Every layer's hidden states of each sequence: ``out[i]`` is (L+1, T_i, D), float32. Sequences of one
    length run together unpadded, so the numbers do not depend on the padding mask."""
    out: list = [None] * len(sequences)
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(sequences):
        by_len.setdefault(len(s), []).append(i)
    with eval_mode(model):
        for _, idx in sorted(by_len.items()):
            for k in range(0, len(idx), batch):
                part = idx[k:k + batch]
                x = torch.tensor([sequences[i] for i in part], dtype=torch.long)  # (B, T)
                o = model(x, token_type_ids=torch.zeros_like(x), attention_mask=torch.ones_like(x),
                          output_hidden_states=True)
                h = torch.stack([t.float() for t in o.hidden_states], 1)  # (B, L+1, T, D)
                for j, i in enumerate(part):
                    out[i] = h[j]
    return out


def probe_set_for(tokenizer, prop: str, labels_csv: bytes | None = None, max_len: int = MAX_SEQ_TOKENS,
                  seed: int = 0) -> ProbeSet:
    """The probe set of ``prop``: the built-in grammar's, or a labels CSV's (``labels`` or ``position``)."""
    if labels_csv is not None:
        return csv_probe_set(tokenizer, labels_from_csv(labels_csv), prop, max_len, seed)
    if prop == CSV_PROPERTY:
        raise InputError(Message("property {prop} probes the labels of your CSV; give one (--labels FILE.csv)",
                                 prop=repr(CSV_PROPERTY)))
    return grammar_probe_set(tokenizer, prop, max_len, seed)


def probe_model(model, tokenizer, prop: str, labels_csv: bytes | None = None, seed: int = 0) -> ProbeResult:
    """Probe every layer of ``model`` for ``prop`` (a built-in property or the labels of ``labels_csv``)."""
    max_len = min(MAX_SEQ_TOKENS, int(model.config.max_position_embeddings))
    ps = probe_set_for(tokenizer, prop, labels_csv, max_len, seed)
    return probe_hidden(ps, hidden_states(model, ps.sequences), seed)


def probe_hidden(ps: ProbeSet, hidden: list[torch.Tensor], seed: int = 0, shuffle: bool = False) -> ProbeResult:
    """Fit the probes of ``ps`` on given hidden states (``hidden[i]``: (L+1, T_i, D)). ``shuffle``: permute the
    training labels first (a sanity check: the held-out accuracy falls to chance)."""
    if not ps.items:
        raise InputError(Message("the probe set of {prop} has no items; give sentences with labelled words",
                                 prop=repr(ps.prop)))
    test = ps.is_test()
    labels = list(ps.labels)
    control = control_labels(labels, ps.types, seed + 1)
    if shuffle:
        tr_idx = [i for i, t in enumerate(test) if not t]
        perm = [labels[i] for i in tr_idx]
        random.Random(seed + 2).shuffle(perm)
        for i, lb in zip(tr_idx, perm):
            labels[i] = lb
    tr = [i for i, t in enumerate(test) if not t]
    te = [i for i, t in enumerate(test) if t]
    if not tr or not te:
        raise InputError(Message("the probe set is too small to hold sentences out; give more sentences"))
    feats = torch.stack([hidden[s][:, p] for s, p in ps.items], 1)  # (L+1, N, D)
    out = []
    for ys in (labels, control):  # the probe, then the control task
        classes = sorted(set(ys))
        ix = {c: k for k, c in enumerate(classes)}
        y = torch.tensor([ix[v] for v in ys])
        accs = [fit_probe(f[tr], y[tr], f[te], y[te], len(classes)) for f in feats]
        out.append((accs, _chance([ys[i] for i in tr], [ys[i] for i in te])))
    (acc, chance), (cacc, cchance) = out
    layers = [LayerProbe(k, round(a, 6), round(c, 6), round(a - c, 6), round(chance, 6), round(cchance, 6))
              for k, (a, c) in enumerate(zip(acc, cacc))]
    return ProbeResult(ps.prop, layers, len(tr), len(te), sorted(set(ps.labels)), note=ps.note)


# ----------------------------------------------------------------------------- runs, steps, caches
def _csv_tag(labels_csv: bytes | None) -> str:
    return "" if labels_csv is None else "_" + hashlib.sha256(bytes(labels_csv)).hexdigest()[:10]


def _weights_file(run_dir: Path, step: int | None) -> Path:
    return step_path(run_dir, step) if step is not None else run_dir / "model.safetensors"


def _cache_name(prop: str, tag: str) -> str:
    return f"probe_v{PROBE_VERSION}_{prop}{tag}.json"


def probe_step(run_dir: str | Path, step: int | None, prop: str, labels_csv: bytes | None = None,
               disk: bool = True, bundle=None) -> ProbeResult:
    """Probes of the run's model after ``step`` (None: its final checkpoint), cached in memory and in the derived-data
    cache (``bertcore.io.derived``, keyed by the weights' content: never written into the run folder)."""
    run_dir = Path(run_dir).resolve()
    tag = _csv_tag(labels_csv)
    key = derived.content_key(_weights_file(run_dir, step))
    mem = (key or str(run_dir), step, prop, tag)
    if mem in _MEMORY:
        _MEMORY.move_to_end(mem)
        return _MEMORY[mem]
    result = _read_cache(key, prop, tag) if disk else None
    if result is None:
        base = bundle if bundle is not None else load_checkpoint(run_dir)
        b = load_step(run_dir, step, bundle=base)
        result = probe_model(b.model, b.tokenizer, prop, labels_csv)
        if disk:
            derived.write(key, _cache_name(prop, tag), json.dumps(result.to_dict()).encode("utf-8"))
    result.step = step
    _MEMORY[mem] = result
    while len(_MEMORY) > _MEMORY_MAX:
        _MEMORY.popitem(last=False)
    return result


def _read_cache(key: str | None, prop: str, tag: str) -> ProbeResult | None:
    raw = derived.read(key, _cache_name(prop, tag))
    if raw is None:
        return None
    try:
        return ProbeResult.from_dict(json.loads(raw.decode("utf-8")))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable entry: recompute


def probe_over_steps(run_dir: str | Path, prop: str, labels_csv: bytes | None = None, disk: bool = True,
                     progress=None) -> ProbesOverSteps:
    """Probe every saved step of ``run_dir`` (the final checkpoint alone for a run without steps/).
    ``progress(done, total)`` is called after each step."""
    steps = list_steps(run_dir)
    todo: list[int | None] = list(steps) if steps else [None]
    base = None
    out = ProbesOverSteps(prop, [s if s is not None else -1 for s in todo])
    for k, s in enumerate(todo):
        tag = _csv_tag(labels_csv)
        key = derived.content_key(_weights_file(Path(run_dir).resolve(), s))
        if base is None and (key or str(Path(run_dir).resolve()), s, prop, tag) not in _MEMORY \
                and _read_cache(key, prop, tag) is None:
            base = load_checkpoint(run_dir)
        out.results.append(probe_step(run_dir, s, prop, labels_csv, disk, bundle=base))
        if progress is not None:
            progress(k + 1, len(todo))
    return out
