"""Fine-tuning on the one training route (``bertcore.training.drive``; BERT §4.1).

A fine-tune is driven exactly like a pretraining run: ``drive`` with the same callbacks (start, step, eval,
checkpoint, end), ``StopSignal``, run.json status lifecycle (running → finished / stopped / failed, with the pid
while it trains), atomic writes and the same place a run directory is created (``open_run_dir``). Only what is
kept in the folder differs, and that is this module's route:

* ``FINETUNE``: one ``FineTuner`` (CLI ``finetune``; every run of a fine-tune study, ``bertcore.finetune.spec``).
  A fine-tune run directory::

      config.json          BertConfig + tokenizer_kind, bertcore_version
      classifier.json      architecture, labels, pair, task, source, mode
      finetune_config.json FinetuneConfig
      vocab.txt            (+ tokenizer.json for WordPiece)
      history.csv          FineTuner.history, rewritten at every held-out evaluation
      model.safetensors    bert.* + classifier.* (HF BertForSequenceClassification names), written at the end
      run.json             kind "finetune", task, labels_used, source + the fields of bertcore.training.runs

The comparison of what pretraining buys (the Fine-tune page) and the label sweep are fine-tune studies
(``bertcore.lab.studies.finetune_study``): two such runs per label count, one from the pretrained weights and one
from random initial weights, side by side in the study runner (``bertcore.launch.study``).

Weights are written when training ends (finished, stopped or failed), not at every evaluation: a fine-tune is
not resumable (nothing to resume in a minute-long run), and all-MiniLM-L6-v2 weighs 90 MB per model.
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from bertcore import __version__
from bertcore.errors import InputError
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.io.checkpoint import atomic_save_safetensors, atomic_write
from bertcore.message import Message
from bertcore.training import runs
from bertcore.training.drive import Route, RunResult, StopSignal, drive, open_run_dir
from bertcore.training.loop import run_steps


def _mode(cfg: FinetuneConfig) -> str:
    return "linear probe (frozen encoder)" if cfg.freeze_encoder else "full fine-tuning"


def _acc(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


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
    with drive(tuner, d, meta, stop, FINETUNE) as result:
        run_steps(tuner)
    return result


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
