"""What one simulated student does, and the checks that each session sees only its own work.

The visit: Overview → Data & tokens → Masking & NSP → Attention (types a sentence) → Predict (types a
sentence with [MASK]) → Embeddings, then around again until the time is up, with a think time before
every action. A *trainer* first opens the Train page, gives the run its own number of steps and presses
Start; at the end it goes back to the Train page and presses Stop.

Isolation: every student has its own marker word (``zqx`` + 9 random letters). It types it into the
Attention and Predict pages and must then find it in what the server drew (the "not in the vocabulary"
notes), outside the text boxes it typed into. Every forward message any session receives is scanned for
marker words; a marker of another session is a leak. A trainer's progress bars must all count to its own
step total; a student who does not train must never see a training's progress bar.
"""
from __future__ import annotations

import asyncio
import random
import re
import string
import time
from dataclasses import dataclass, field

from loadgen.protocol import RunResult, StreamlitTab

MARKER_RE = re.compile(rb"zqx[a-z]{9}")
_STEP_RE = re.compile(r"step (\d+)/(\d+)")

# (label in the report, URL path, action). Actions: "visit" only, or "type" a sentence after the visit.
VISIT = [
    ("Overview", "", "visit"),
    ("Data & tokens", "data_tokens", "visit"),
    ("Masking & NSP", "masking_nsp", "visit"),
    ("Attention", "attention", "type"),
    ("Predict", "predict", "type"),
    ("Embeddings", "embeddings", "visit"),
]
LEARN_PAGES = ("Overview", "Data & tokens", "Masking & NSP")
INSPECT_PAGES = ("Attention", "Attention: typed", "Predict", "Predict: typed", "Embeddings")

ATTENTION_INPUT = "Sentence A"
PREDICT_INPUT = "Text with one or more [MASK]"
STEPS_SLIDER = "steps"


def new_marker(rng: random.Random, taken: set[str]) -> str:
    """A marker word no other session has: ``zqx`` and 9 lowercase letters (never in the vocabulary)."""
    for _ in range(1000):
        m = "zqx" + "".join(rng.choice(string.ascii_lowercase) for _ in range(9))
        if m not in taken:
            taken.add(m)
            return m
    raise RuntimeError("could not draw a unique marker")


@dataclass
class Outcome:
    """Everything one session measured and found."""

    name: str
    times: dict[str, list[float]] = field(default_factory=dict)  # report label -> seconds per request
    errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)  # isolation failures
    own_text_missing: int = 0
    own_text_seen: int = 0
    busy: int = 0  # "Server busy" answers to a Start
    steps: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, step) of its own run
    train_total: int | None = None
    training_started: bool = False
    requests: int = 0


class Student:
    """One simulated student (one browser tab) following ``VISIT`` until ``deadline`` (time.monotonic) or
    for ``rounds`` rounds of the visit, whichever comes first."""

    def __init__(self, name: str, port: int, marker: str, *, rng: random.Random, think: tuple[float, float],
                 deadline: float, train_steps: int | None = None, timeout: float = 60.0, record: bool = True,
                 rounds: int = 0):
        self.out = Outcome(name, train_total=train_steps)
        self.marker = marker.encode()
        self.rng = rng
        self.think = think
        self.deadline = deadline
        self.train_steps = train_steps
        self.record = record
        self.rounds = rounds  # 0: go round the visit until the deadline
        # the tab may outlive the deadline by the wind-down (going to Train and pressing Stop)
        self.tab = StreamlitTab(port, timeout=timeout, max_seconds=deadline - time.monotonic() + timeout + 30,
                                on_payload=self._scan, on_element=self._progress)

    # ------------------------------------------------------------------ isolation checks (called per message)
    def _scan(self, data: bytes) -> None:
        for m in set(MARKER_RE.findall(data)):
            if m != self.marker:
                self.out.leaks.append(f"{self.out.name} received another session's text {m.decode()!r}")

    def _progress(self, kind: str, el) -> None:
        if kind != "progress":
            return
        m = _STEP_RE.search(el.text)
        if m is None:
            return
        step, total = int(m.group(1)), int(m.group(2))
        if self.train_steps is None:
            self.out.leaks.append(f"{self.out.name} (no training) was shown a training's progress: {el.text!r}")
        elif total != self.train_steps:
            self.out.leaks.append(f"{self.out.name} was shown a run of {total} steps, its own has "
                                  f"{self.train_steps}: {el.text!r}")
        else:
            self.out.steps.append((time.monotonic(), step))

    # ------------------------------------------------------------------ recording
    def note(self, label: str, r: RunResult, where: str) -> bool:
        """Record one request: its time under ``label`` (when ok and recording), its error and exceptions."""
        self.out.requests += 1
        if self.record and r.ok:
            self.out.times.setdefault(label, []).append(r.seconds)
        if not r.ok:
            self.out.errors.append(f"{self.out.name} {where}: {r.error}")
        self.out.exceptions.extend(f"{self.out.name} {where}: {e}" for e in r.exceptions)
        return r.ok

    def _check_own_text(self, where: str) -> None:
        if self.marker in self.tab.shown_bytes():
            self.out.own_text_seen += 1
        else:
            self.out.own_text_missing += 1
            self.out.leaks.append(f"{self.out.name} {where}: its own text {self.marker.decode()!r} is not on the page")

    async def _think(self) -> bool:
        """Wait a think time; False when the deadline comes first."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, self.rng.uniform(*self.think)))
        return time.monotonic() < self.deadline

    # ------------------------------------------------------------------ the script
    async def run(self, start_delay: float = 0.0) -> Outcome:
        """Open the app after ``start_delay`` s, follow the visit until the deadline, close the tab."""
        try:
            await asyncio.sleep(max(0.0, start_delay))
            if time.monotonic() >= self.deadline:
                return self.out
            if not self.note("Overview", await self.tab.open(""), "open /"):
                return self.out
            if self.train_steps is not None:
                await self._think() and await self.start_training()
            await self._visit_loop()
            if self.train_steps is not None:
                await self.stop_training()
        finally:
            await self.tab.close()
        return self.out

    async def _visit_loop(self) -> None:
        first = 1  # the tab opened on the Overview already
        for _ in range(self.rounds or 10_000):  # bounded; the deadline ends it long before 10,000
            for label, path, action in VISIT[first:]:
                if not await self._think():
                    return
                if not self.note(label, await self.tab.goto(path), f"open /{path}"):
                    return
                if action == "type":
                    if not await self._think():
                        return
                    if not await self._type(label):
                        return
            first = 0

    async def _type(self, label: str) -> bool:
        word = self.marker.decode()
        if label == "Attention":
            texts = {ATTENTION_INPUT: f"the cat {word} sits on the mat ."}
        else:
            texts = {PREDICT_INPUT: f"the cows [MASK] the hay near the {word} ."}
        ok = self.note(f"{label}: typed", await self.tab.interact(texts=texts), f"type on {label}")
        if ok:
            self._check_own_text(label)
        return ok

    async def start_training(self) -> bool:
        """Open the Train page, set this run's own number of steps and press Start."""
        if not self.note("Train", await self.tab.goto("train"), "open /train"):
            return False
        r = await self.tab.interact(sliders={STEPS_SLIDER: self.train_steps}, click="Start")
        if not self.note("Train: start", r, "press Start"):
            return False
        if b"Server busy" in self.tab.shown_bytes():
            self.out.busy += 1
            return False
        start = self.tab.widget("button", "Start")
        if start is None or not start.disabled:
            self.out.errors.append(f"{self.out.name}: pressed Start, but no training is running")
            return False
        self.out.training_started = True
        return True

    async def stop_training(self) -> None:
        """Go to the Train page and press Stop (bounded by the tab's timeout), as a tidy student would."""
        if self.tab.closed_reason:
            return
        if not self.note("Train", await self.tab.goto("train"), "open /train to stop"):
            return
        stop = self.tab.widget("button", "Stop")
        if stop is not None and not stop.disabled:
            self.note("Train: stop", await self.tab.interact(click="Stop"), "press Stop")
        elif self.out.training_started:  # too many steps to finish in a test: it stopped on its own
            status = [el.progress.text for el in self.tab.elements.values() if el.WhichOneof("type") == "progress"]
            self.out.errors.append(f"{self.out.name}: its training was no longer running at the end "
                                   f"({status[0] if status else 'no progress bar'}); abandoned because the "
                                   "page's polls came too late?")

    def steps_per_second(self, skip_seconds: float = 2.0) -> float | None:
        """Its own run's speed from the progress bars it saw: steps over time, after the first ``skip_seconds``."""
        pts = self.out.steps
        if len(pts) < 2:
            return None
        t0 = pts[0][0] + skip_seconds
        pts = [p for p in pts if p[0] >= t0] or pts
        (ta, sa), (tb, sb) = pts[0], pts[-1]
        if tb - ta < 2.0 or sb <= sa:
            return None
        return (sb - sa) / (tb - ta)
