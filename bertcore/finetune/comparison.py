"""What pre-training buys (BERT §4 / §5.1 ablations in spirit): fine-tune the same architecture twice, once from
pretrained weights and once from random initial weights, on the same labelled examples, batch order, dropout
masks and classifier init, and compare their held-out accuracy.

``PretrainingComparison`` drives ``bertcore.finetune.route.compare`` (the fine-tuning route, a
``PairTuner``: a step of each model in turn, so their held-out curves grow side by side) in one background
thread, into a run directory ``out_dir``. It has no UI code: a UI polls ``snapshot()`` (also the heartbeat:
nobody polling for ``abandon_after`` seconds means the tab was closed, and the thread stops itself through the
route's ``StopSignal``).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from bertcore.errors import BertcoreError
from bertcore.finetune.route import PRETRAINED, SCRATCH, PairTuner, compare
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import RunResult, StopSignal
from bertcore.training.history import History
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


class PretrainingComparison:
    """Fine-tunes ``pretrained`` (a BertForPreTraining) and its random-init twin on ``task`` in a thread, into the
    run directory ``out_dir`` (created by the service when missing)."""

    def __init__(self, pretrained, tokenizer, task, config: FinetuneConfig, out_dir, source: str = "",
                 abandon_after: float = 10.0, name: str = ""):
        self.pretrained, self.tokenizer, self.task, self.config = pretrained, tokenizer, task, config
        self.source, self.out_dir, self.name = source, out_dir, name
        self.abandon_after = float(abandon_after)
        self.tuners: dict = {}
        self.models: dict = {}
        self.labels_used = 0
        self.result: RunResult | None = None
        self._lock = threading.Lock()
        self._stop = StopSignal()
        self.histories = {PRETRAINED: History.finetuning(), SCRATCH: History.finetuning()}
        self._status, self._message = "preparing", None
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0
        self.last_poll = time.monotonic()

    def start(self, on_exit=None) -> "PretrainingComparison":
        """Start the thread; ``on_exit()`` runs when it ends (e.g. to free a server-wide training slot)."""
        self._t0 = self.last_poll = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(on_exit,), name="bx-finetune", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.request("stopped by the user")

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    @property
    def _finished(self) -> float | None:
        """Monotonic time the thread ended, None while it runs (read by explorer's live registry)."""
        return self._t1 or None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> ComparisonSnapshot:
        self.last_poll = time.monotonic()
        with self._lock:
            hists = dict(self.histories)
            status, message = self._status, self._message
        step = min(len(h) for h in hists.values())
        end = self._t1 or time.monotonic()
        return ComparisonSnapshot(status, self.running, step, self.config.steps, max(0.0, end - self._t0), hists,
                                  message)

    # -- the training thread (never touches a UI) --
    def _on_start(self, ev) -> None:
        with self._lock:
            self._status = "running"

    def _on_step(self, ev) -> None:
        if time.monotonic() - self.last_poll > self.abandon_after:
            self._stop.request(ABANDONED)

    def _run(self, on_exit) -> None:
        try:
            torch.set_num_threads(1)
            pair = PairTuner(self.pretrained, self.tokenizer, self.task, self.config,
                             callbacks=Callbacks(start=self._on_start, step=self._on_step))
            with self._lock:
                self.models, self.tuners, self.labels_used = pair.models, pair.tuners, pair.labels_used
                self.histories = pair.histories
            self.result = compare(pair, self.out_dir, source=self.source, name=self.name, stop=self._stop)
            with self._lock:
                if self.result.status == "failed":
                    self._status, self._message = "error", f"fine-tuning failed: {self.result.reason}"
                elif self.result.status == "stopped":
                    self._status = "abandoned" if self._stop.reason == ABANDONED else "stopped"
                else:
                    self._status = "finished"
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            if isinstance(e, BertcoreError):
                msg = str(e)
            elif isinstance(e, OSError):
                msg = f"could not save the fine-tune to {self.out_dir}: {e}"
            else:
                msg = f"fine-tuning failed: {type(e).__name__}: {e}"
            with self._lock:
                self._status, self._message = "error", msg
        finally:
            self._t1 = time.monotonic()
            if on_exit is not None:
                on_exit()
