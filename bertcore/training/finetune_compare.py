"""What pre-training buys (BERT §4 / §5.1 ablations in spirit): fine-tune the same architecture twice, once from
pretrained weights and once from random initial weights, on the same labelled examples, batch order, dropout
masks and classifier init, and compare their held-out accuracy.

``PretrainingComparison`` runs both ``FineTuner`` s in one background thread, a step of each in turn, so their
held-out curves grow side by side. It has no UI code: a UI polls ``snapshot()`` (also the heartbeat: nobody
polling for ``abandon_after`` seconds means the tab was closed, and the thread stops itself). With ``out_dir``
it keeps itself on disk as it goes (``bertcore.training.finetune_store``): both histories at every held-out
evaluation, the weights at the end.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pandas as pd

from bertcore.training import finetune_store, runs
from bertcore.training.finetune import HISTORY_COLUMNS, FinetuneConfig, FineTuner
from bertcore.training.finetune_store import PRETRAINED, SCRATCH  # noqa: F401 - the page imports them from here


@dataclass
class ComparisonSnapshot:
    status: str  # preparing | running | finished | stopped | abandoned | error
    running: bool
    step: int
    steps: int
    elapsed: float
    histories: dict  # label -> DataFrame (HISTORY_COLUMNS)
    message: str | None

    @property
    def progress(self) -> float:
        return min(1.0, self.step / self.steps) if self.steps else 0.0

    def final_accuracy(self, label: str) -> float | None:
        h = self.histories.get(label)
        ev = h["eval_accuracy"].dropna() if h is not None and len(h) else None
        return float(ev.iloc[-1]) if ev is not None and len(ev) else None


def summary_line(acc_pre: float | None, acc_scratch: float | None, n_labels: int, source: str = "") -> str:
    """'Pretraining bought +N points ...' from the two held-out accuracies."""
    if acc_pre is None or acc_scratch is None:
        return "No held-out accuracy yet."
    pts = 100 * (acc_pre - acc_scratch)
    verb = "bought" if pts >= 0 else "cost"
    src = f" ({source})" if source else ""
    return (f"Pretraining{src} {verb} {abs(pts):.1f} points of held-out accuracy with {n_labels} labelled "
            f"examples: {acc_pre:.1%} from pretrained weights vs {acc_scratch:.1%} from random initial weights.")


class PretrainingComparison:
    """Fine-tunes ``pretrained`` (a BertForPreTraining) and its random-init twin on ``task`` in a thread."""

    def __init__(self, pretrained, tokenizer, task, config: FinetuneConfig, source: str = "",
                 abandon_after: float = 10.0, out_dir=None, name: str = ""):
        self.pretrained, self.tokenizer, self.task, self.config = pretrained, tokenizer, task, config
        self.source = source
        self.out_dir, self.name = out_dir, name or f"{task.name}, {config.labels or 'all'} labels, from {source}"
        self._meta: dict = {}
        self.abandon_after = float(abandon_after)
        self.tuners: dict[str, FineTuner] = {}
        self.models: dict = {}
        self.labels_used = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rows: dict[str, list[dict]] = {PRETRAINED: [], SCRATCH: []}
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
        self._stop.set()

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
            hists = {k: pd.DataFrame(list(v), columns=HISTORY_COLUMNS) for k, v in self._rows.items()}
            status, message = self._status, self._message
            step = min(len(v) for v in self._rows.values())
        end = self._t1 or time.monotonic()
        return ComparisonSnapshot(status, self.running, step, self.config.steps, max(0.0, end - self._t0), hists,
                                  message)

    def _run(self, on_exit) -> None:
        try:
            import torch

            torch.set_num_threads(1)
            from bertcore.model.classification import BertForSequenceClassification
            from bertcore.training.finetune import scratch_twin

            seed = self.config.seed
            pre = BertForSequenceClassification.from_pretraining(self.pretrained, self.task.num_labels,
                                                                 self.task.labels, seed)
            self.models = {PRETRAINED: pre, SCRATCH: scratch_twin(pre, seed)}
            self.tuners = {k: FineTuner(m, self.tokenizer, self.task, self.config, label=k)
                           for k, m in self.models.items()}
            self.labels_used = len(self.tuners[PRETRAINED].examples)
            if self.out_dir is not None:
                runs.mark_active(self.out_dir, True)
                self._meta = finetune_store.new_meta(self.name, self.task, self.source, self.config,
                                                     self.labels_used)
                self._save_progress()
            with self._lock:
                self._status = "running"
            while not all(t.done for t in self.tuners.values()):
                if self._stop.is_set():
                    break
                if time.monotonic() - self.last_poll > self.abandon_after:
                    with self._lock:
                        self._status = "abandoned"
                    break
                evaluated = False
                for k, t in self.tuners.items():  # one step each: same batch, same dropout masks
                    row = t.step()
                    if t.error:
                        raise RuntimeError(f"{k}: {t.error}")
                    ev = row.get("eval_accuracy")
                    evaluated = evaluated or (ev is not None and ev == ev)  # a held-out evaluation (not NaN)
                    with self._lock:
                        self._rows[k].append(dict(row))
                if evaluated:
                    self._save_progress()
            for k, t in self.tuners.items():
                if not t.done:
                    t.finalize()  # evaluate the weights we keep
                    with self._lock:
                        if self._rows[k]:
                            self._rows[k][-1] = t.history.iloc[-1].to_dict()
            for m in self.models.values():
                m.eval()
            with self._lock:
                if self._status == "running":
                    self._status = "stopped" if self._stop.is_set() else "finished"
            self._save_final()
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            from bertcore.errors import BertcoreError

            with self._lock:
                self._status = "error"
                self._message = str(e) if isinstance(e, BertcoreError) else f"fine-tuning failed: {e}"
            self._save_progress("failed", self._message)
        finally:
            self._t1 = time.monotonic()
            if self.out_dir is not None:
                runs.mark_active(self.out_dir, False)
            if on_exit is not None:
                on_exit()

    def _save_progress(self, status: str = "running", reason: str | None = None) -> None:
        """Both histories and comparison.json (a disk error becomes the message; training goes on)."""
        if self.out_dir is None or not self._meta:
            return
        with self._lock:
            hists = {k: pd.DataFrame(list(v), columns=HISTORY_COLUMNS) for k, v in self._rows.items()}
        try:
            finetune_store.write_progress(self.out_dir, self._meta, hists, status, reason)
        except OSError as e:
            with self._lock:
                self._message = f"could not save the fine-tune to {self.out_dir}: {e}"

    def _save_final(self) -> None:
        """The weights of both models and the final status ("abandoned" is kept as stopped, with the reason)."""
        if self.out_dir is None or not self._meta:
            return
        status = {"finished": "finished", "stopped": "stopped", "abandoned": "stopped"}.get(self._status, "failed")
        reason = {"stopped": "stopped by the user",
                  "abandoned": "stopped: nobody watched it (the tab was closed)"}.get(self._status)
        try:
            finetune_store.write_final(self.out_dir, self._meta, self.tuners, status, reason)
        except OSError as e:
            with self._lock:
                self._message = f"could not save the fine-tune to {self.out_dir}: {e}"
