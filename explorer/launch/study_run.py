"""A study (``bertcore.launch.study``) run by the explorer in the background: the one mechanism behind the Lab page,
Compare designs and the Fine-tune page's comparison and label sweep (no streamlit here: the thread never calls
``st.*``).

``StudyRun`` (a ``bertcore.training.job.BackgroundJob``) takes up to ``lanes`` of the server's training slots (at
least one, else ``ServerBusy``; each lane is one training process) and finishes the study's missing runs through the
runner, which keeps study.json current at every run's end and score. Every event of the lanes lands in the one relay
(``_on_event``): each run's rows go into a ``History`` of its own (the pages draw them while they grow), the latest
study data (the table) is kept for ``snapshot()``, which is also the heartbeat: a study nobody polls for
``BERTCORE_ABANDON_SECONDS`` stops itself (its finished runs stay; Start again finishes the rest).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.launch import study as S
from bertcore.launch import worker
from bertcore.training.history import History
from bertcore.training.job import BackgroundJob
from explorer.launch.training_slots import (
    ServerBusy,
    abandon_seconds,
    acquire_slot,
    max_trainings,
    own_process,
    release_slot,
    training_nice,
    training_runtime,
)
from explorer.i18n import mark
from explorer.session import client_limits


@dataclass
class StudySnapshot:
    status: str  # idle | preparing | running | finished | stopped | abandoned | error
    running: bool
    elapsed: float
    data: dict  # the study as study.json holds it (bertcore.launch.study.study_data)
    states: dict  # (variant, seed) -> cell state (bertcore.launch.study.CELL_STATES)
    histories: dict  # (variant, seed) -> History of the run's rows, for the runs this process trained
    run_dirs: dict  # (variant, seed) -> its run directory
    message: str | None
    lanes: int = 0
    labels_used: dict = field(default_factory=dict)  # (variant, seed) -> a fine-tune's labelled examples

    @property
    def done(self) -> int:
        return sum(s in ("scored", "failed") for s in self.states.values())

    @property
    def total(self) -> int:
        return len(self.states)

    @property
    def progress(self) -> float:
        return self.done / self.total if self.total else 0.0

    # -- progress in steps, as a TrainingRun's snapshot gives it (the Compare and Fine-tune pages, the sidebar) --
    @property
    def labels(self) -> list[str]:
        """The variants' names, in the study's order."""
        return [v["name"] for v in self.data.get("variants", [])]

    @property
    def steps(self) -> int:
        """Steps of each run."""
        return int(self.data.get("steps") or 0)

    def steps_done(self, key: tuple) -> int:
        """Steps run ``key`` = (variant, seed) has trained: all once it finished, else its history's rows."""
        if self.states.get(key) in ("trained", "evaluating", "scored"):
            return self.steps
        h = self.histories.get(key)
        return len(h) if h is not None else 0

    @property
    def step(self) -> int:
        """The fewest steps any run has trained (the runs of a comparison grow side by side)."""
        return min((self.steps_done(k) for k in self.states), default=0)

    @property
    def total_done(self) -> int:
        return sum(self.steps_done(k) for k in self.states)

    @property
    def total_steps(self) -> int:
        return self.steps * len(self.states)

    @property
    def eta(self) -> float | None:
        """Seconds left at the pace so far (None before the first step or once it ended)."""
        done = self.total_done
        if not self.running or not done or self.total_steps <= done:
            return None
        return self.elapsed * (self.total_steps - done) / done


class StudyRun(BackgroundJob):
    """One study's missing runs, trained side by side in up to ``lanes`` of the server's training slots."""

    kind = "study"

    def __init__(self, plan: S.Plan, lanes: int = 2, abandon_after: float | None = None):
        super().__init__(abandon_seconds() if abandon_after is None else abandon_after)
        self.plan = plan
        self.lanes_wanted = max(1, int(lanes))
        self.nice = training_nice()  # read here, so a bad value is an error on Start, never in the thread
        self.runtime = training_runtime()
        self.in_process = not own_process()
        self._slots: list[int] = []
        self._data = S.study_data(plan, "preparing")
        self._states = {(c.variant, c.seed): c.state for c in plan.cells}
        self._dirs = {(c.variant, c.seed): c.dir for c in plan.cells}
        self._hist: dict = {}
        self._labels_used: dict = {}
        self.adopted = False

    @property
    def out_dir(self):
        return self.plan.out

    # -- control (UI thread) --
    def start(self) -> "StudyRun":
        """Take one to ``lanes`` training slots (ServerBusy when none is free) and start the runner's thread."""
        client_limits.charge("start")
        want = min(self.lanes_wanted, max(1, len(self.plan.todo)))
        base = id(self)
        for k in range(want):
            try:
                acquire_slot(base + k)
            except ServerBusy:
                if not self._slots:
                    client_limits.refund("start")
                    raise
                break
            self._slots.append(base + k)
        try:
            super().start(on_exit=self._release)
        except BaseException:
            self._release()
            raise
        return self

    def _release(self) -> None:
        for s in self._slots:
            release_slot(s)

    def progress(self) -> float:
        with self._lock:
            n = len(self._states)
            return sum(s in ("scored", "failed") for s in self._states.values()) / n if n else 0.0

    def snapshot(self) -> StudySnapshot:
        self.heartbeat()
        with self._lock:
            data = json.loads(json.dumps(self._data))
            states, hist, dirs = dict(self._states), dict(self._hist), dict(self._dirs)
            status, message, used = self._status, self._message, dict(self._labels_used)
        return StudySnapshot(status, self.running, self.elapsed, data, states, hist, dirs, message,
                             len(self._slots), used)

    # -- the thread: never calls st.* --
    def work(self) -> None:
        self.set_status("running")
        data = S.run(self.plan, len(self._slots), self.stop_signal, self._on_event, self.in_process, self.nice,
                     self.runtime)
        if data["status"] == "failed":
            self.set_status("error", data.get("reason") or mark("the study failed"))

    def _on_event(self, ev: dict) -> None:
        """The one relay: every lane's events, in any lane's thread."""
        kind = ev.get("ev")
        if kind == "study":
            with self._lock:
                self._data = ev["data"]
                for v in ev["data"]["variants"]:
                    for r in v["runs"]:
                        self._states[(v["name"], int(r["seed"]))] = r["status"]
            return
        key = (ev.get("variant"), ev.get("seed"))
        if key[0] is None:
            return
        with self._lock:
            if kind == "start":
                h = History(ev["columns"], ev["eval_keys"]) if ev.get("columns") else History.pretraining()
                worker.sync_rows(h, ev["history"])
                self._hist[key] = h
                self._states[key] = "training"
                if ev.get("labels_used") is not None:
                    self._labels_used[key] = int(ev["labels_used"])
            elif kind == "rows" and key in self._hist:
                worker.sync_rows(self._hist[key], ev["history"])
            elif kind == "evaluating":
                self._states[key] = "evaluating"


def lanes_for(plan: S.Plan, wanted: int | None = None) -> int:
    """Lanes to ask for: the server's cap on trainings, at most one per missing run."""
    cap = max_trainings()
    return max(1, min(wanted or cap, cap, len(plan.todo) or 1))
