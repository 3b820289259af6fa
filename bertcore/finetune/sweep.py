"""The label sweep: final held-out accuracy against the number of labelled examples, for a model fine-tuned from
pretrained weights and the same architecture from random initial weights (BERT §4-§5: pretraining matters most
when labels are few; d2l §14.8).

Every point is one ``PairTuner`` (``bertcore.finetune.route``): both models on the same labelled
examples, batch order, dropout masks and classifier init, evaluated once at the end on the task's fixed held-out
split. The labelled subsets are seeded prefixes (``data.tasks.labelled_subset``), so a larger point contains the
smaller ones. ``LabelSweep`` runs a sweep as a background job (no UI code) and keeps it in ``sweep.json``
of a comparison's folder, rewritten atomically after every point.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from bertcore.errors import BertcoreError, InputError
from bertcore.finetune.route import PRETRAINED, SCRATCH, PairTuner
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.io.checkpoint import atomic_write
from bertcore.message import Message
from bertcore.training import runs
from bertcore.training.callbacks import Callbacks
from bertcore.training.job import BackgroundJob
from bertcore.training.runs import pid_alive

DEFAULT_POINTS = (16, 64, 256, 0)  # 0 = every labelled example of the task's pool
SWEEP_STEPS = 60  # steps per point by default (each point fine-tunes two models)
SWEEP_FILE = "sweep.json"
MAX_POINTS = 12


def parse_points(text: str) -> list[int]:
    """"16,64,256,all" -> [16, 64, 256, 0]; InputError that says what to type for anything else."""
    out: list[int] = []
    for part in str(text).split(","):
        p = part.strip().lower()
        if p in ("all", "0"):
            n = 0
        elif p.isdigit() and 1 <= int(p) <= 10_000_000:
            n = int(p)
        else:
            raise InputError(Message("--sweep {text}: {part} is not a number of labels; give a comma-separated list "
                                     "of counts from 1 and/or 'all', e.g. --sweep 16,64,256,all", text=repr(text),
                                     part=repr(part.strip())))
        if n not in out:
            out.append(n)
    if not 1 <= len(out) <= MAX_POINTS:
        raise InputError(Message("--sweep takes 1 to {limit} label counts, e.g. --sweep 16,64,256,all",
                                 limit=MAX_POINTS))
    return out


def label_sweep(pretrained, tokenizer, task, config: FinetuneConfig, points=DEFAULT_POINTS, stop=None,
                on_point=None, runtime=None) -> list[dict]:
    """Fine-tune both starting points at every label count in ``points`` with ``config`` (its ``labels`` and
    ``eval_every`` are replaced); one dict per finished point: labels, labels_used, steps, pretrained,
    random_init (held-out accuracies). ``stop`` (an Event) ends it early, dropping the unfinished point;
    ``on_point(point, points_so_far)`` is called after each point."""
    done: list[dict] = []
    for n in points:
        if stop is not None and stop.is_set():
            break
        listen = Callbacks(step=lambda ev: ev.trainer.stop() if stop.is_set() else None) if stop is not None else None
        pair = PairTuner(pretrained, tokenizer, task, config.replace(labels=int(n), eval_every=0), callbacks=listen,
                         runtime=runtime)
        pair.run()
        if pair.error:
            if n:
                raise InputError(Message("the sweep at {n} labels diverged ({err}); lower the learning rate", n=n,
                                         err=pair.error))
            raise InputError(Message("the sweep at all labels diverged ({err}); lower the learning rate",
                                     err=pair.error))
        if pair.step_count < config.steps:
            break  # stopped in the middle of this point
        point = {"labels": int(n), "labels_used": pair.labels_used, "steps": pair.step_count,
                 "pretrained": pair.accuracy(PRETRAINED), "random_init": pair.accuracy(SCRATCH)}
        done.append(point)
        if on_point is not None:
            on_point(point, list(done))
    return done


def sweep_table(points: list[dict]) -> str:
    """The sweep as plain-text lines (the CLI's output)."""
    lines = [f"{'labels':>8} {'pretrained':>11} {'random init':>12} {'points':>7}"]
    for p in points:
        gap = 100 * (p["pretrained"] - p["random_init"])
        lines.append(f"{p['labels_used']:>8} {p['pretrained']:>11.3f} {p['random_init']:>12.3f} {gap:>+7.1f}")
    return "\n".join(lines)


def write_sweep(d: str | Path, data: dict) -> None:
    atomic_write(Path(d) / SWEEP_FILE, json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_sweep(d: str | Path) -> dict | None:
    """sweep.json of folder ``d`` (None when there is none or it is damaged). A "running" sweep whose process is
    gone reads as "stopped" (interrupted); its finished points are kept."""
    try:
        data = json.loads((Path(d) / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        return None
    if data.get("status") == "running":
        pid = data.get("pid")
        if not (pid == os.getpid() or (isinstance(pid, int) and pid_alive(pid))):
            data.update(status="stopped", reason=f"interrupted after {len(data['points'])} points "
                                                 "(the process ended)")
    return data


class LabelSweep(BackgroundJob):
    """Runs ``label_sweep`` as a background job (``bertcore.training.job.BackgroundJob``) and keeps it in
    ``out_dir/sweep.json`` (its state on disk, rewritten at every point); ``snapshot()`` is the heartbeat."""

    kind = "label sweep"

    def __init__(self, pretrained, tokenizer, task, config: FinetuneConfig, out_dir, points=DEFAULT_POINTS,
                 source: str = "", abandon_after: float = 10.0):
        super().__init__(abandon_after)
        self.pretrained, self.tokenizer, self.task, self.config = pretrained, tokenizer, task, config
        self.out_dir, self.points, self.source = Path(out_dir), [int(p) for p in points], source
        self._data = {"format": 1, "status": "running", "reason": None, "task": task.name, "source": source,
                      "planned": self.points, "steps": int(config.steps), "seed": int(config.seed),
                      "chance": 1 / task.num_labels, "points": [], "pid": os.getpid()}

    def progress(self) -> float:
        with self._lock:
            return len(self._data["points"]) / max(1, len(self.points))

    def snapshot(self) -> dict:
        self.heartbeat()
        with self._lock:
            return json.loads(json.dumps(self._data))

    def failure(self, e: Exception) -> str:
        msg = str(e) if isinstance(e, BertcoreError) else f"the sweep failed: {type(e).__name__}: {e}"
        self._save(status="failed", reason=msg)
        return msg

    def _save(self, **changes) -> None:
        with self._lock:
            self._data.update(changes, updated=runs.now())
            data = dict(self._data)
        try:
            write_sweep(self.out_dir, data)
        except OSError as e:
            with self._lock:
                self._data["message"] = f"could not save the sweep to {self.out_dir}: {e}"

    def work(self) -> None:
        runs.mark_active(self.out_dir, True)  # the comparison cannot be deleted while it is swept
        try:
            torch.set_num_threads(1)
            self.set_status("running")
            self._save()
            got = label_sweep(self.pretrained, self.tokenizer, self.task, self.config, self.points, self.stop_signal,
                              on_point=lambda p, so_far: self._save(points=so_far))
            if len(got) == len(self.points):
                self._save(points=got, status="finished")
            else:
                self._save(points=got, status="stopped", reason=f"stopped after {len(got)} of {len(self.points)} "
                           "points")
        finally:
            runs.mark_active(self.out_dir, False)
