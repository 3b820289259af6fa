"""Train an SAE on a run and keep it in the run directory: the one route the CLI (``sae``) and the Features page
take. ``train_run_sae`` draws the run's own corpus (``bertcore.analysis.sae_data``), trains the SAE
(``bertcore.analysis.sae``), measures its quality and labels its features (``bertcore.analysis.features``), and
writes ``RUN/saes/<name>/`` in SAELens's layout (``bertcore.io.sae_io``). ``saes_over_training`` does the same for
a few saved steps of the run (``bertcore.io.steps``), so the features can be watched appearing.
"""
from __future__ import annotations

import json

import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bertcore.analysis.features import feature_table
from bertcore.analysis.lens import has_mlm_head
from bertcore.analysis.sae import SAETrainConfig, quality, train_sae
from bertcore.analysis.sae_data import (collect, draw_pairs, hook_name, site_width, spliced_losses,
                                        token_set)
from bertcore.analysis.trace import check_layer, trace
from bertcore.data.token_labels import builtin_head
from bertcore.errors import InputError
from bertcore.io.checkpoint import atomic_save_safetensors, load_checkpoint, load_safetensors
from bertcore.io import derived
from bertcore.io.sae_io import (FEATURES_FILE, SAES_DIR, TRAINING_FILE, WEIGHTS_FILE, hook_of, load_sae, read_json,
                                sae_cfg, save_sae, write_json)
from bertcore.io.steps import list_steps, load_step
from bertcore.message import Message
from bertcore import settings
from bertcore.training.runs import read_run_json
from bertcore.training.run_corpus import run_corpus

EFFECTS_FILE = "output_effects.safetensors"  # (d_sae, V) float16: each feature's mean Δlogit (steering's targets)
DEFAULT_SIZE, MAX_SIZE, DEFAULT_K = 8, 64, 8
N_TRAIN_PAIRS, N_EVAL_PAIRS = 2000, 1000
OVER_TRAINING_STEPS = 5  # SAEs over training: this many saved steps, spread from the first to the last


def max_sae_mb() -> float:
    """The memory an SAE's evaluation may use (env BERTCORE_MAX_SAE_MB, default 1024)."""
    return settings.number("BERTCORE_MAX_SAE_MB")


@dataclass
class SAESpec:
    """What to train: ``layer`` (0-based) and ``site`` name the tensor; ``size`` is the dictionary size as a
    multiple of its width; ``k`` (top-k) or ``l1`` (ReLU + L1); ``step`` a saved step of the run (None: final)."""
    layer: int
    site: str = "residual"
    size: int = DEFAULT_SIZE
    k: int | None = DEFAULT_K
    l1: float | None = None
    step: int | None = None
    seed: int = 0
    steps: int = 400
    n_train: int = N_TRAIN_PAIRS
    n_eval: int = N_EVAL_PAIRS

    @property
    def architecture(self) -> str:
        return "standard" if self.l1 is not None else "topk"

    def name(self) -> str:
        sparsity = f"l1-{self.l1:g}" if self.l1 is not None else f"k{self.k}"
        step = f"-step{self.step:06d}" if self.step is not None else ""
        return f"layer{self.layer}-{self.site}-x{self.size}-{sparsity}-seed{self.seed}{step}"


def check_spec(spec: SAESpec, model) -> SAESpec:
    check_layer(model, spec.layer)
    hook_name(spec.layer, spec.site)
    if isinstance(spec.size, bool) or not isinstance(spec.size, int) or not 1 <= spec.size <= MAX_SIZE:
        raise InputError(Message("size {size} must be a whole number from 1 to {most}: the dictionary size as a "
                                 "multiple of the activation's width (8 = eight times as many features)",
                                 size=repr(spec.size), most=MAX_SIZE))
    width = site_width(model.config, spec.site)
    if spec.l1 is None and (spec.k is None or not 1 <= int(spec.k) <= spec.size * width):
        raise InputError(Message("k={k} must be between 1 and the dictionary size {n}", k=spec.k, n=spec.size * width))
    need = memory_mb(spec, width)
    if need > max_sae_mb():
        raise InputError(Message("a dictionary of {n} features needs about {need} MB to train and label, over the "
                                 "{limit} MB budget; choose a smaller size (e.g. {size}) or raise the budget with "
                                 "BERTCORE_MAX_SAE_MB", n=spec.size * width, need=f"{need:,.0f}",
                                 limit=f"{max_sae_mb():,.0f}", size=max(1, spec.size // 4)))
    return spec


def memory_mb(spec: SAESpec, width: int, tokens_per_pair: int = 24) -> float:
    """Roughly what the labelling needs: the evaluation tokens' activations (float32) and their ranks (float64),
    and the training batch's activations and gradients."""
    d_sae = spec.size * width
    n_eval = spec.n_eval * tokens_per_pair
    return (n_eval * d_sae * (4 + 8 + 8) + 1024 * d_sae * 4 * 6 + d_sae * width * 4 * 8) / 2**20


def _model_at(run_dir: Path, step: int | None, bundle=None):
    base = bundle if bundle is not None else load_checkpoint(run_dir)
    return load_step(run_dir, step, bundle=base) if step is not None else base


def sae_corpus(run_dir: Path, n: int):
    """The run's corpus, or for the built-in grammar just its first ``n`` pairs (all an SAE draws from)."""
    spec = str(read_run_json(run_dir).get("corpus_spec") or "")
    m = re.fullmatch(r"builtin(?::(\d+))?", spec)
    if m is not None:
        return builtin_head(int(m.group(1) or 0), n)
    corpus = run_corpus(run_dir)
    if corpus is None:
        raise InputError(Message("{run} was trained from prepared shards, whose text is not kept with the run; an "
                                 "SAE needs the run's own corpus", run=run_dir.name))
    return corpus


def train_run_sae(run_dir: str | Path, spec: SAESpec, out: str | Path | None = None, progress=None, stop=None,
                  bundle=None, runtime=None) -> Path:
    """Train, measure, label and save one SAE of ``run_dir``; returns its folder (``RUN/saes/<name>`` unless
    ``out``). ``progress(stage, fraction)`` reports "data", "train", "measure", "label" and "done"; ``stop()``
    returning True stops training early (the SAE so far is measured and saved). ``runtime``
    (bertcore.training.device.Runtime): where the SAE's steps run (default the CPU at fp32); the activations are
    read, and the SAE measured and saved, on the CPU."""
    torch.set_num_threads(1)
    run_dir = Path(run_dir).expanduser()
    report = progress or (lambda stage, frac: None)
    t0 = time.perf_counter()
    b = _model_at(run_dir, spec.step, bundle)
    model, tok = b.model, b.tokenizer
    check_spec(spec, model)
    corpus = sae_corpus(run_dir, 2 * (spec.n_train + spec.n_eval))
    hook = hook_name(spec.layer, spec.site)
    report("data", 0.0)
    max_len = int(getattr(b.train_config, "max_seq_len", None) or min(48, model.config.max_position_embeddings))
    max_len = min(max_len, int(model.config.max_position_embeddings))
    tr, ev = draw_pairs(len(corpus.pairs), spec.n_train, spec.n_eval, spec.seed)
    ts_train = token_set(corpus, tok, tr, max_len, spec.seed + 1)
    ts_eval = token_set(corpus, tok, ev, max_len, spec.seed + 2)
    a_train, a_eval = collect(model, ts_train, hook), collect(model, ts_eval, hook)
    report("data", 1.0)
    width = a_train.x.shape[1]
    cfg = SAETrainConfig(d_in=width, d_sae=spec.size * width, architecture=spec.architecture,
                         k=int(spec.k or 1), l1=float(spec.l1 or 1.0), steps=int(spec.steps), seed=int(spec.seed))
    t_train = time.perf_counter()
    report("train", 0.0)
    sae, log = train_sae(a_train.x, cfg, progress=lambda s, n, loss: report("train", s / n), stop=stop,
                         runtime=runtime)
    train_seconds = time.perf_counter() - t_train
    report("measure", 0.0)
    q = quality(sae, a_eval.x)
    freq = q.pop("frequency")
    losses = spliced_losses(model, ts_eval, hook, sae) if has_mlm_head(model) else {}
    report("label", 0.0)
    table, effect = feature_table(model, tok, sae, a_eval)
    d = Path(out).expanduser() if out is not None else run_dir / SAES_DIR / spec.name()
    training = {"spec": asdict(spec), "train_config": cfg.to_dict(), "hook": hook, "run": str(run_dir.resolve()),
                "run_name": run_dir.name, "step": spec.step, "tokens_train": int(len(a_train.x)),
                "tokens_eval": int(len(a_eval.x)), "grammar_labels": ts_eval.grammar, **log,
                "quality": {k: round(float(v), 6) for k, v in q.items()},
                "losses": {k: (round(float(v), 6) if isinstance(v, float) else v) for k, v in losses.items()},
                "frequency_max": float(freq.max()), "train_seconds": round(train_seconds, 2),
                "runtime": runtime.label if runtime is not None else "cpu, fp32",
                "total_seconds": round(time.perf_counter() - t0, 2), "stopped_early": log["steps_done"] < cfg.steps}
    save_sae(sae, d, sae_cfg(sae, hook, run_dir.name, spec.layer, max_len), training)
    if effect is not None:
        atomic_save_safetensors({"effect": torch.from_numpy(effect).half()}, d / EFFECTS_FILE)
    write_json(d / FEATURES_FILE, table)
    report("done", 1.0)
    return d


def summary(sae_dir: str | Path) -> dict:
    """The JSON the CLI's ``sae`` prints: the quality figures (variance_explained, l0, dead_fraction,
    dense_fraction), the losses (clean, spliced, zero-ablated, loss_recovered) and how it was trained."""
    d = Path(sae_dir)
    t = read_json(d / TRAINING_FILE) or {}
    return {"sae_dir": str(d), "hook": t.get("hook"), "step": t.get("step"), **t.get("quality", {}),
            **t.get("losses", {}), "train_seconds": t.get("train_seconds"), "total_seconds": t.get("total_seconds"),
            "tokens_train": t.get("tokens_train"), "tokens_eval": t.get("tokens_eval"),
            "grammar_labels": t.get("grammar_labels"), "spec": t.get("spec")}


def run_of(sae_dir: str | Path) -> Path:
    """The run an SAE folder belongs to: ``RUN/saes/<name>`` (or the run its training.json names)."""
    d = Path(sae_dir).expanduser()
    parent = d.parent.parent
    if d.parent.name == SAES_DIR and (parent / "config.json").is_file():
        return parent
    t = read_json(d / TRAINING_FILE) or {}
    if t.get("run") and (Path(t["run"]) / "config.json").is_file():
        return Path(t["run"])
    raise InputError(Message("cannot find the run of {dir}: it is not inside a run's saes/ folder and its "
                             "training.json names no run that exists; keep SAE folders in RUN/saes/", dir=str(d)))


def open_sae(sae_dir: str | Path, bundle=None):
    """(sae, cfg, training, model bundle at the SAE's step) of an SAE folder; the model's site must match."""
    d = Path(sae_dir).expanduser()
    sae, cfg = load_sae(d)
    training = read_json(d / TRAINING_FILE) or {}
    run = run_of(d)
    b = _model_at(run, training.get("step"), bundle)
    hook = hook_of(cfg)
    names = {hook_name(i, s) for i in range(b.model.config.num_hidden_layers) for s in ("residual", "ffn")}
    if hook not in names:
        raise InputError(Message("the SAE reads {hook}, which this model does not have", hook=repr(hook)))
    width = site_width(b.model.config, "residual" if hook.endswith(".output") else "ffn")
    if width != sae.d_in:
        raise InputError(Message("the SAE reads {d_in}-wide activations but {hook} of this model is {width} wide; "
                                 "it belongs to another model", d_in=sae.d_in, hook=hook, width=width))
    return sae, cfg, training, b


def features_of(sae_dir: str | Path, bundle=None) -> dict:
    """The SAE's feature table: its features.json (written when the SAE was trained); when that is missing or
    unreadable, recomputed and kept in the derived-data cache (``bertcore.io.derived``), never in the run folder."""
    d = Path(sae_dir).expanduser()
    table = read_json(d / FEATURES_FILE)
    if table is not None and isinstance(table.get("features"), list):
        return table
    key = derived.content_key(d / WEIGHTS_FILE)
    cached = derived.read(key, FEATURES_FILE)
    if cached is not None:
        try:
            table = json.loads(cached.decode("utf-8"))
        except ValueError:
            table = None
        if isinstance(table, dict) and isinstance(table.get("features"), list):
            return table
    sae, cfg, training, b = open_sae(d, bundle)
    spec = training.get("spec") or {}
    corpus = sae_corpus(run_of(d), 2 * (spec.get("n_train", N_TRAIN_PAIRS) + spec.get("n_eval", N_EVAL_PAIRS)))
    _, ev = draw_pairs(len(corpus.pairs), spec.get("n_train", N_TRAIN_PAIRS), spec.get("n_eval", N_EVAL_PAIRS),
                       spec.get("seed", 0))
    ts = token_set(corpus, b.tokenizer, ev, int(cfg.get("metadata", {}).get("context_size") or 48),
                   spec.get("seed", 0) + 2)
    table, _ = feature_table(b.model, b.tokenizer, sae, collect(b.model, ts, hook_of(cfg)))
    derived.write(key, FEATURES_FILE, json.dumps(table, ensure_ascii=False).encode("utf-8"))
    return table


def effect_of(sae_dir: str | Path, feature: int) -> torch.Tensor | None:
    """Feature ``feature``'s saved output effect (V,), or None when the SAE has none."""
    p = Path(sae_dir) / EFFECTS_FILE
    if not p.is_file():
        return None
    return load_safetensors(p, "the SAE's output effects")["effect"][feature].float()


def text_activations(sae, hook: str, model, tokenizer, text: str, text_b: str | None = None) -> dict:
    """{"tokens", "hook", "activations"} for a text: the SAE's features (tokens × d_sae) at the site ``hook``, from
    the glass box's ``trace`` of that text (the activations ``trace --json`` prints)."""
    t = trace(model, tokenizer, text, text_b, layer=int(hook.split(".")[1]), final=False)
    with torch.no_grad():
        f = sae.encode(torch.from_numpy(t.tensors[hook]).float())
    return {"tokens": t.tokens, "hook": hook, "activations": f.numpy()}


def pick_steps(steps: list[int], n: int = OVER_TRAINING_STEPS) -> list[int]:
    """``n`` saved steps spread from the first to the last (all of them when there are fewer)."""
    if len(steps) <= n:
        return list(steps)
    idx = np.unique(np.round(np.linspace(0, len(steps) - 1, n)).astype(int))
    return [steps[i] for i in idx]


def saes_over_training(run_dir: str | Path, spec: SAESpec, n: int = OVER_TRAINING_STEPS, progress=None,
                       stop=None, runtime=None) -> list[Path]:
    """One SAE per chosen saved step (``pick_steps``: the first and the last saved step and some between);
    folders that exist already are kept, not trained again. ``progress(done, total, stage, fraction)``."""
    run_dir = Path(run_dir).expanduser()
    steps = list_steps(run_dir)
    if len(steps) < 2:
        raise InputError(Message("{run} has no saved training steps to replay; train a new run (it keeps its weights "
                                 "at every evaluation)", run=run_dir.name))
    chosen = pick_steps(steps, n)
    base = load_checkpoint(run_dir)
    out = []
    for i, s in enumerate(chosen):
        if stop is not None and stop():
            break
        sp = SAESpec(**{**asdict(spec), "step": s})
        d = run_dir / SAES_DIR / sp.name()
        if not (d / FEATURES_FILE).is_file():
            cb = (lambda stage, frac, i=i: progress(i, len(chosen), stage, frac)) if progress else None
            d = train_run_sae(run_dir, sp, progress=cb, stop=stop, bundle=base, runtime=runtime)
        out.append(d)
        if progress:
            progress(i + 1, len(chosen), "done", 1.0)
    return out
