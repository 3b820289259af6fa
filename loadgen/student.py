"""What one simulated student does, and the checks that each session sees only its own work.

The visit is ``VISIT``: a list of pages, each opened from the page menu and followed by its actions (``Type``
a sentence into a text box, ``Click`` a button), with a think time before every step; a student goes round it
until the time is up. Adding a page to the load test is one line in ``VISIT``, e.g.

    Page("Probes", "probes"),

A *trainer* first opens the Train page, gives the run its own number of steps and presses Start; at the end
it goes back to the Train page and presses Stop.

Isolation: every student has its own marker word (``zqx`` + 9 random letters). Every ``Type`` puts it into the
sentence it types; with ``check=True`` the student must then find it in what the server drew (the "not in the
vocabulary" notes), outside the text boxes it typed into. Every forward message any session receives is
scanned for marker words; a marker of another session is a leak. A trainer's progress bars must all count to
its own step total; a student who does not train must never see a training's progress bar.
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
WARMUP_MARKER, SOLO_MARKER = "zqxwarmupaaa", "zqxsoloaaaaa"  # the untimed warm-up's and solo training's words
_STEP_RE = re.compile(r"step (\d+)/(\d+)")



@dataclass(frozen=True)
class Type:
    """Type ``text`` (``{marker}`` becomes the student's marker word) into the text box labelled ``box`` and
    submit it; with ``check`` the page must then show the marker outside the box (the "not in the vocabulary"
    note). Reported as "<page>: typed"."""

    box: str
    text: str
    check: bool = True
    name: str = "typed"


@dataclass(frozen=True)
class Click:
    """Press the button labelled ``button``. Reported as "<page>: <name>" (``name`` defaults to the label); with
    ``if_shown`` a page that does not show the button is no error (nothing is pressed or timed)."""

    button: str
    name: str = ""
    if_shown: bool = False  # a button the page draws only sometimes (Predict's, for a text not yet explained)

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", self.button)


@dataclass(frozen=True)
class Page:
    """A page of the visit: its label in the report, its URL path ("" = the default page) and the actions a
    student takes there, in order, each after a think time."""

    label: str
    path: str
    actions: tuple = ()

    def __init__(self, label: str, path: str, *actions):
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "actions", tuple(actions))

    def step_labels(self) -> list[str]:
        return [self.label] + [f"{self.label}: {a.name}" for a in self.actions]


ATTENTION_INPUT = "Sentence A"
PREDICT_INPUT = "Text with one or more [MASK]"
FORWARD_INPUT = "Sentence A"
STEPS_SLIDER = "steps"
EXPLAIN_BUTTON = "Compute the attributions"

# The class visit, in order. One line per page: add a new page here (its label, URL path and actions).
VISIT = [
    Page("Overview", ""),
    Page("Data & tokens", "data_tokens"),
    Page("Masking & NSP", "masking_nsp"),
    Page("Inside the model", "forward", Type(FORWARD_INPUT, "the cat {marker} eats the cheese .", check=False),
         Click("Next ▶", "Next"), Click("Next ▶", "Next")),
    Page("Attention", "attention", Type(ATTENTION_INPUT, "the cat {marker} sits on the mat .")),
    Page("Predict", "predict", Type(PREDICT_INPUT, "the cows [MASK] the hay near the {marker} ."),
         Click(EXPLAIN_BUTTON, "explain", if_shown=True)),  # the attributions of the typed text, asked for
    Page("Embeddings", "embeddings"),
    Page("Features", "features"),  # a new workspace has no SAE: the page offers to train one on a trained run
]
TRAIN_LABELS = ("Train", "Train: start", "Train: stop")  # timed, but not held to the page-time target


def step_labels(visit: list[Page] = VISIT) -> list[str]:
    """Every label the visit reports, in visit order."""
    return [lab for p in visit for lab in dict.fromkeys(p.step_labels())]


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
    events: list[tuple[float, float, str, str]] = field(default_factory=list)  # (start, seconds, who, label)
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
            self.out.events.append((time.monotonic() - r.seconds, r.seconds, self.out.name, label))
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
            first = VISIT[0]
            if not self.note(first.label, await self.tab.open(first.path), f"open /{first.path}"):
                return self.out
            if self.train_steps is not None:
                await self._think() and await self.start_training()
            # a trainer is on the Train page now: it goes on with the second page, as it would from the menu
            await self._visit_loop(on_first_page=self.train_steps is None)
            if self.train_steps is not None:
                await self.stop_training()
        finally:
            await self.tab.close()
        return self.out

    async def _visit_loop(self, on_first_page: bool) -> None:
        opened = on_first_page  # the tab opened on the first page already: no menu click for it
        skip = not on_first_page  # a trainer starts the first round at the second page
        for _ in range(self.rounds or 10_000):  # bounded; the deadline ends it long before 10,000
            for page in VISIT[int(skip):]:
                if not opened:
                    if not await self._think():
                        return
                    if not self.note(page.label, await self.tab.goto(page.path), f"open /{page.path}"):
                        return
                opened = False
                for action in page.actions:
                    if not await self._think():
                        return
                    if not await self.act(page, action):
                        return
            skip = False

    async def act(self, page: Page, action) -> bool:
        """One action on the page shown now, recorded under "<page>: <action name>"."""
        label = f"{page.label}: {action.name}"
        if isinstance(action, Type):
            r = await self.tab.interact(texts={action.box: action.text.format(marker=self.marker.decode())})
            ok = self.note(label, r, f"type on {page.label}")
            if ok and action.check:
                self._check_own_text(page.label)
            return ok
        if action.if_shown and self.tab.widget("button", action.button) is None:
            return True  # e.g. the same text again on a later round: its attributions are shown already
        return self.note(label, await self.tab.interact(click=action.button), f"press {action.button} on {page.label}")

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
        """Its own run's speed from the progress bars it saw: steps over time, from ``skip_seconds`` after the first
        bar that showed a step (the time before it, a training process starting, is not training speed: it is the
        same for the solo run and a run under load, but a 20 s solo run would count it about six times as much)."""
        pts = self.out.steps
        if len(pts) < 2:
            return None
        first = next((t for t, n in pts if n > 0), pts[0][0])
        t0 = first + skip_seconds
        pts = [p for p in pts if p[0] >= t0] or pts
        (ta, sa), (tb, sb) = pts[0], pts[-1]
        if tb - ta < 2.0 or sb <= sa:
            return None
        return (sb - sa) / (tb - ta)
