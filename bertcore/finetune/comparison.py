"""What pre-training buys (BERT §4 / §5.1 ablations in spirit): fine-tune the same architecture twice, once from
pretrained weights and once from random initial weights, on the same labelled examples, batch order, dropout
masks and classifier init, and compare their held-out accuracy.

``PretrainingComparison`` drives ``bertcore.finetune.route.compare`` (the fine-tuning route, a
``PairTuner``: a step of each model in turn, so their held-out curves grow side by side) as a
background job (``bertcore.training.job.BackgroundJob``), into a run directory ``out_dir``. It has no UI code: a
UI polls ``snapshot()`` (also the heartbeat: nobody polling for ``abandon_after`` seconds means the tab was
closed, and the job stops itself through the route's ``StopSignal``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bertcore.errors import BertcoreError
from bertcore.finetune.route import PRETRAINED, SCRATCH, PairTuner, compare
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import RunResult
from bertcore.training.history import History
from bertcore.training.job import BackgroundJob
from bertcore.message import Message

ABANDONED = "stopped: nobody watched it (the tab was closed)"


@dataclass
class ComparisonSnapshot:
    status: str  # preparing | running | finished | stopped | abandoned | error
    running: bool
    step: int
    steps: int
    elapsed: float
    histories: dict  # label -> History (bertcore.training.history), the tuners' own
    message: str | None

    @property
    def progress(self) -> float:
        return min(1.0, self.step / self.steps) if self.steps else 0.0

    def final_accuracy(self, label: str) -> float | None:
        h = self.histories.get(label)
        return h.last_eval().get("eval_accuracy") if h is not None else None


def summary_line(acc_pre: float | None, acc_scratch: float | None, n_labels: int, source: str = "") -> str:
    """'Pretraining bought +N points ...' from the two held-out accuracies."""
    if acc_pre is None or acc_scratch is None:
        return Message("No held-out accuracy yet.")
    pts = 100 * (acc_pre - acc_scratch)
    values = dict(src=f" ({source})" if source else "", pts=f"{abs(pts):.1f}", n=n_labels, pre=f"{acc_pre:.1%}",
                  scratch=f"{acc_scratch:.1%}")
    if pts >= 0:
        return Message("Pretraining{src} bought {pts} points of held-out accuracy with {n} labelled examples: {pre} "
                       "from pretrained weights vs {scratch} from random initial weights.", **values)
    return Message("Pretraining{src} cost {pts} points of held-out accuracy with {n} labelled examples: {pre} "
                   "from pretrained weights vs {scratch} from random initial weights.", **values)


class PretrainingComparison(BackgroundJob):
    """Fine-tunes ``pretrained`` (a BertForPreTraining) and its random-init twin on ``task`` in a thread, into the
    run directory ``out_dir`` (created by the service when missing; the job's state is kept there as job.json).
    Start, stop, the heartbeat and the end's order: ``bertcore.training.job.BackgroundJob``."""

    kind = "fine-tuning"
    abandoned_reason = ABANDONED

    def __init__(self, pretrained, tokenizer, task, config: FinetuneConfig, out_dir, source: str = "",
                 abandon_after: float = 10.0, name: str = ""):
        super().__init__(abandon_after, state_dir=out_dir)
        self.pretrained, self.tokenizer, self.task, self.config = pretrained, tokenizer, task, config
        self.source, self.out_dir, self.name = source, out_dir, name
        self.tuners: dict = {}
        self.models: dict = {}
        self.labels_used = 0
        self.result: RunResult | None = None
        self.histories = {PRETRAINED: History.finetuning(), SCRATCH: History.finetuning()}

    def progress(self) -> float:
        step = min(len(h) for h in self.histories.values())
        return min(1.0, step / self.config.steps) if self.config.steps else 0.0

    def snapshot(self) -> ComparisonSnapshot:
        self.heartbeat()
        with self._lock:
            hists = dict(self.histories)
            status, message = self._status, self._message
        step = min(len(h) for h in hists.values())
        return ComparisonSnapshot(status, self.running, step, self.config.steps, self.elapsed, hists, message)

    def failure(self, e: Exception) -> str:
        if isinstance(e, BertcoreError):
            return str(e)
        if isinstance(e, OSError):
            return f"could not save the fine-tune to {self.out_dir}: {e}"
        return f"fine-tuning failed: {type(e).__name__}: {e}"

    # -- the training thread (never touches a UI) --
    def work(self) -> None:
        torch.set_num_threads(1)
        pair = PairTuner(self.pretrained, self.tokenizer, self.task, self.config,
                         callbacks=Callbacks(start=lambda ev: self.set_status("running")))
        with self._lock:
            self.models, self.tuners, self.labels_used = pair.models, pair.tuners, pair.labels_used
            self.histories = pair.histories
        self.result = compare(pair, self.out_dir, source=self.source, name=self.name, stop=self.stop_signal)
        if self.result.status == "failed":
            self.set_status("error", f"fine-tuning failed: {self.result.reason}")
