"""Fine-tuning on the one training route (``bertcore.training.drive``; BERT §4.1).

A fine-tune is driven exactly like a pretraining run: ``drive`` with the same callbacks (start, step, eval,
checkpoint, end), ``StopSignal``, run.json status lifecycle (running → finished / stopped / failed, with the pid
while it trains), atomic writes and the same place a run directory is created (``open_run_dir``). Only what is
kept in the folder differs, and that is this module's two routes:

* ``FINETUNE``: one ``FineTuner`` (CLI ``finetune``). A fine-tune run directory::

      config.json          BertConfig + tokenizer_kind, bertcore_version
      classifier.json      architecture, labels, pair, task, source, mode
      finetune_config.json FinetuneConfig
      vocab.txt            (+ tokenizer.json for WordPiece)
      history.csv          FineTuner.history, rewritten at every held-out evaluation
      model.safetensors    bert.* + classifier.* (HF BertForSequenceClassification names), written at the end
      run.json             kind "finetune", task, labels_used, source + the fields of bertcore.training.runs

* ``COMPARISON``: a ``PairTuner`` (the Fine-tune page, the label sweep): the pretrained model and the same
  architecture from random initial weights stepped in lock-step on the same labelled examples, batch order,
  dropout masks and classifier init. Its folder has run.json (kind "finetune-comparison") and one fine-tune
  run directory per model, ``pretrained/`` and ``random-init/`` (histories while it trains, the rest at the end).

Weights are written when training ends (finished, stopped or failed), not at every evaluation: a fine-tune is
not resumable (nothing to resume in a minute-long run), and all-MiniLM-L6-v2 weighs 90 MB per model.
"""
from __future__ import annotations

import json
import math
import tempfile
import threading
from pathlib import Path

import torch

from bertcore import __version__
from bertcore.errors import InputError
from bertcore.finetune.models import scratch_twin
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.io.checkpoint import atomic_save_safetensors, atomic_write
from bertcore.message import Message
from bertcore.model.classification import BertForSequenceClassification
from bertcore.training import runs
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import Route, RunResult, StopSignal, drive, open_run_dir
from bertcore.training.loop import Stoppable, run_steps

PRETRAINED, SCRATCH = "pretrained", "random init"  # the two models of a comparison
FOLDERS = {PRETRAINED: "pretrained", SCRATCH: "random-init"}


def _mode(cfg: FinetuneConfig) -> str:
    return "linear probe (frozen encoder)" if cfg.freeze_encoder else "full fine-tuning"


def _acc(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


# ------------------------------------------------------------------ one model
def _save_model_files(d: Path, tuner: FineTuner, meta: dict) -> None:
    """A fine-tune folder's files but run.json: the description at step 0 and at the end, history.csv always,
    the weights once training has ended."""
    final = meta.get("status") != "running"
    m, tok, task, cfg = tuner.model, tuner.tokenizer, tuner.task, tuner.config
    d.mkdir(parents=True, exist_ok=True)
    if final or tuner.step_count == 0:
        def js(obj) -> str:
            return json.dumps(obj, indent=2) + "\n"

        atomic_write(d / "config.json", js({**m.config.to_dict(), "tokenizer_kind": getattr(tok, "kind", "word"),
                                            "bertcore_version": __version__}))
        atomic_write(d / "classifier.json", js({
            "architecture": "BertForSequenceClassification", "labels": m.labels, "pair": task.pair,
            "task": task.name, "task_description": task.description, "source": meta.get("source", ""),
            "mode": _mode(cfg)}))
        atomic_write(d / "finetune_config.json", js(cfg.to_dict()))
        with tempfile.TemporaryDirectory(dir=d) as tmp:
            tok.save(tmp)
            for f in Path(tmp).iterdir():
                atomic_write(d / f.name, f.read_bytes())
    atomic_write(d / "history.csv", tuner.history.to_csv())
    if final:
        atomic_save_safetensors({k: v.detach().cpu().contiguous().clone() for k, v in m.state_dict().items()},
                                d / "model.safetensors", metadata={"format": "pt"})


def _single_metrics(tuner: FineTuner) -> dict:
    return {"eval_accuracy": _acc(tuner.eval_accuracy)}


def finetune_meta(tuner: FineTuner, source: str, name: str = "") -> dict:
    """run.json of a new fine-tune run (``drive`` adds status, steps_done, metrics, pid, updated)."""
    task, cfg = tuner.task, tuner.config
    return runs.run_meta(name or f"fine-tune {task.name}, {len(tuner.examples)} labels", kind="finetune",
                         total_steps=cfg.steps, seed=int(cfg.seed), corpus=f"task {task.name}", source=source,
                         task=task.name, labels_used=len(tuner.examples), mode=_mode(cfg),
                         runtime=tuner.runtime.label)


FINETUNE = Route(lambda tr, d, meta: _save_model_files(d, tr, meta), _single_metrics, lambda tr, meta: tr)


def finetune(tuner: FineTuner, run_dir=None, *, parent=None, source: str = "", name: str = "",
             stop: StopSignal | None = None) -> RunResult:
    """Fine-tune ``tuner`` into ``run_dir`` (or a new folder below ``parent``, default the CLI runs folder); who
    listens registers on ``tuner.callbacks``."""
    meta = finetune_meta(tuner, source, name)
    d = open_run_dir(run_dir, parent, meta["name"])
    return drive(tuner, d, meta, stop, FINETUNE)


def save_finetune_run(directory, tuner: FineTuner, source: str, status: str = "finished", name: str = "") -> Path:
    """Write a whole fine-tune run directory for ``tuner`` as it is now, with run.json's ``status`` (outside the
    service: e.g. a model fine-tuned by a script). Returns the directory."""
    d = Path(directory).expanduser()
    if d.exists() and not d.is_dir():
        raise InputError(Message("{path} exists and is not a directory; choose another output folder", path=str(d)))
    write_finetune_dir(d, tuner, {**finetune_meta(tuner, source, name), "status": status, "reason": tuner.error})
    return d


def write_finetune_dir(d, tuner: FineTuner, meta: dict) -> None:
    """Write a whole fine-tune folder for ``tuner`` as it is now, run.json last (meta's status is kept)."""
    d = Path(d)
    _save_model_files(d, tuner, meta)
    runs.write_run_json(d, {**meta, "steps_done": int(tuner.step_count), "metrics": _single_metrics(tuner),
                            "updated": runs.now()})


# ------------------------------------------------------------------ two models in lock-step
class PairTuner(Stoppable):
    """Trainer-shaped: the pretrained model and its random-init twin, one step of each per ``step()``.

    Both ``FineTuner`` s seed their labelled subset, batch order and dropout from ``config.seed`` and the
    classifier layer of both is drawn from the same seed, so the two see the same batches, dropout masks and
    classifier init: the gap in held-out accuracy is what the pretrained encoder brought."""

    def __init__(self, pretrained, tokenizer, task, config: FinetuneConfig, callbacks: Callbacks | None = None,
                 runtime=None):
        pre = BertForSequenceClassification.from_pretraining(pretrained, task.num_labels, task.labels, config.seed)
        self.models = {PRETRAINED: pre, SCRATCH: scratch_twin(pre, config.seed)}
        self.tuners = {k: FineTuner(m, tokenizer, task, config, label=k, runtime=runtime)
                       for k, m in self.models.items()}
        self.runtime = self.tuners[PRETRAINED].runtime
        self.model = torch.nn.ModuleDict({FOLDERS[k].replace("-", "_"): m for k, m in self.models.items()})
        self.tokenizer, self.task, self.config = tokenizer, task, config
        self.error: str | None = None
        self._stop = threading.Event()
        self.callbacks = callbacks.copy() if callbacks is not None else Callbacks()
        # the pair's own record: one row per lock-step, the pretrained model's held-out accuracy marks evaluations
        self.history = self.tuners[PRETRAINED].history

    @property
    def labels_used(self) -> int:
        return len(self.tuners[PRETRAINED].examples)

    @property
    def step_count(self) -> int:
        return min(t.step_count for t in self.tuners.values())

    @property
    def done(self) -> bool:
        return self.error is not None or all(t.done for t in self.tuners.values())

    @property
    def histories(self) -> dict:
        """Each model's History, by label."""
        return {k: t.history for k, t in self.tuners.items()}

    def accuracy(self, label: str) -> float | None:
        return _acc(self.tuners[label].eval_accuracy)


    def step(self) -> dict:
        """One step of each model: {"step", "eval_accuracy" (the pretrained one's), PRETRAINED: row, SCRATCH: row}."""
        rows = {}
        for k, t in self.tuners.items():
            rows[k] = t.step()
            if t.error:
                self.error = f"{k}: {t.error}"
                return {}
        return {"step": self.step_count, "eval_accuracy": rows[PRETRAINED].get("eval_accuracy", math.nan), **rows}

    def finalize(self) -> None:
        for t in self.tuners.values():
            if not t.done:
                t.finalize()  # evaluate the weights we keep

    def run(self, n: int | None = None):
        return run_steps(self, n)


def comparison_meta(pair: PairTuner, source: str, name: str = "") -> dict:
    """run.json of a new comparison (``drive`` adds status, steps_done, metrics, pid, updated)."""
    task, cfg = pair.task, pair.config
    return runs.run_meta(name or f"{task.name}, {cfg.labels or 'all'} labels, from {source}",
                         kind="finetune-comparison", total_steps=cfg.steps, seed=int(cfg.seed),
                         corpus=f"task {task.name}", source=source, task=task.name,
                         task_description=task.description, task_labels=list(task.labels), pair=bool(task.pair),
                         labels_used=pair.labels_used, steps=int(cfg.steps), mode=_mode(cfg),
                         finetune_config=cfg.to_dict(), runtime=pair.runtime.label)


def _save_pair(pair: PairTuner, d: Path, meta: dict) -> None:
    """Both models' folders: histories while training, whole fine-tune run directories at the end."""
    for label, tuner in pair.tuners.items():
        sub = d / FOLDERS[label]
        if meta.get("status") == "running":
            _save_model_files(sub, tuner, meta)
        else:
            one = finetune_meta(tuner, meta.get("source", ""), f"{meta.get('name', 'fine-tune')} · {label}")
            write_finetune_dir(sub, tuner, {**one, "created": meta.get("created"), "status": meta["status"],
                                            "reason": meta.get("reason")})


def _pair_metrics(pair: PairTuner) -> dict:
    return {f"eval_accuracy_{FOLDERS[k].replace('-', '_')}": pair.accuracy(k) for k in pair.tuners}


COMPARISON = Route(lambda tr, d, meta: _save_pair(tr, d, meta), _pair_metrics, lambda tr, meta: tr)


def compare(pair: PairTuner, run_dir=None, *, parent=None, source: str = "", name: str = "",
            stop: StopSignal | None = None) -> RunResult:
    """Fine-tune both models of ``pair`` into ``run_dir`` (or a new folder below ``parent``); who listens
    registers on ``pair.callbacks``."""
    meta = comparison_meta(pair, source, name)
    d = open_run_dir(run_dir, parent, pair.task.name)
    return drive(pair, d, meta, stop, COMPARISON)
