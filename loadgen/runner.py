"""Runs a load test against a server that is already running on 127.0.0.1:PORT.

Phases (each bounded in time):

1. **Warm-up** (not timed): one session opens every page once, as a teacher does before class, so that
   the first student does not pay the server's imports.
2. **Solo training** (only with trainings > 0 and ``solo_seconds`` > 0): one session starts a training,
   moves to the Overview and, from the first step its sidebar shows, lets it poll for ``solo_seconds``; its steps/s
   is the baseline.
3. **Load**: ``sessions`` students start within ``ramp`` seconds and follow ``loadgen.student.VISIT`` until
   ``seconds`` have passed; the first ``trainings`` of them start a training first. The server's RSS and
   CPU are sampled every second meanwhile.
4. **Solo training again**, once the load's trainings have ended (the server's child processes gone; an error if
   they still run ``EVENT_TIMEOUTS`` x ``timeout`` after the load): the baseline is the mean of the two solo runs,
   because this machine's speed drifts by 10-20% from one minute to the next (docs/BENCH-HISTORY.md, "One torch thread
   for the pages"), and a baseline taken only before the load made the ratio as noisy as that.

With ``flood`` (``loadgen.flood``), one client address opens that many sessions during phase 3, from when the
students' trainings have started, and presses Start in a loop beside the students; the report's pages, errors and
trainings stay the students' own, and the flood's numbers go to its own entry, ``flood``.
"""
from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass

from loadgen.flood import FloodOutcome, FloodSettings, flood_report, run_flood_process
from loadgen.protocol import http_get
from loadgen.report import ServerMonitor, descendants, find_server_pid, page_stats, windows, write_timeline
from loadgen.student import (SOLO_MARKER, TRAIN_LABELS, VISIT, WARMUP_MARKER, Outcome, Page, Student, new_marker,
                             step_labels)

TRAIN_STEPS_BASE = 4000  # trainers get 4000, 4010, ...: long enough not to finish, unique per session
SOLO_TRAIN_STEPS = 4990
TARGET_P95 = 1.5
TARGET_RSS_MB = 4096
TARGET_TRAIN_RATIO = 0.6
# A training's start and end are events that the generator waits for, at most 3 x --timeout each: a training
# process starts (imports torch, builds its model; its first step came after 65 s on a 2-core machine with a load
# average of 11) and the load's trainings end after their step and a checkpoint, or, with a Stop that never came,
# once the server takes their tab for closed (BERTCORE_ABANDON_SECONDS)
EVENT_TIMEOUTS = 3


@dataclass
class Settings:
    port: int
    sessions: int
    seconds: float
    trainings: int = 0
    think: tuple[float, float] = (5.0, 15.0)
    ramp: float = 10.0
    solo_seconds: float = 20.0
    warmup: bool = True
    timeout: float = 60.0
    seed: int = 0
    rounds: int = 0  # > 0: each student goes round the visit this many times, then leaves
    pids: tuple[int, ...] = ()  # processes to sample; default: the one listening on the port
    flood: FloodSettings | None = None  # one client address flooding the server beside the students
    timeline: str = ""  # a CSV file for every request of the load phase (report.write_timeline); "" = none


async def server_ready(port: int) -> bool:
    try:
        status, _, body = await http_get(port, "/_stcore/health")
    except (OSError, asyncio.TimeoutError, ValueError, IndexError):
        return False
    return status == 200 and body.strip() == b"ok"


async def warm_up(port: int, timeout: float) -> Outcome:
    """One untimed pass over the visit, its actions included (and the Train page)."""
    st = Student("warm-up", port, WARMUP_MARKER, rng=random.Random(0), think=(0.0, 0.0),
                 deadline=time.monotonic() + 10 * timeout, timeout=timeout, record=False)
    try:
        ok = st.note(VISIT[0].label, await st.tab.open(VISIT[0].path), f"open /{VISIT[0].path}")
        for i, page in enumerate(VISIT + [Page("Train", "train")]):
            if not ok:
                break
            if i > 0:
                ok = st.note(page.label, await st.tab.goto(page.path), f"open /{page.path}")
            for action in page.actions:
                ok = ok and await st.act(page, action)
    finally:
        await st.tab.close()
    return st.out


async def solo_training(port: int, seconds: float, timeout: float) -> tuple[float | None, Outcome]:
    """Steps/s of one training alone: start it, move to the Overview, let the sidebar poll, press Stop."""
    st = Student("solo", port, SOLO_MARKER, rng=random.Random(0), think=(0.0, 0.0),
                 deadline=time.monotonic() + seconds + (EVENT_TIMEOUTS + 3) * timeout, train_steps=SOLO_TRAIN_STEPS,
                 timeout=timeout, record=False)
    speed = None
    try:
        if st.note("Overview", await st.tab.open(""), "open /") and await st.start_training():
            st.note("Overview", await st.tab.goto(""), "open /")
            if await _first_step(st, EVENT_TIMEOUTS * timeout):  # timed from its first step (its start is slow)
                await asyncio.sleep(seconds)
                speed = st.steps_per_second()
            await st.stop_training()
    finally:
        await st.tab.close()
    return speed, st.out


async def _first_step(st: Student, timeout: float) -> bool:
    """Wait until the sidebar has shown a step of ``st``'s own run, at most ``timeout`` s (else an error)."""
    end = time.monotonic() + timeout
    while not any(n > 0 for _, n in st.out.steps):
        if time.monotonic() >= end or st.tab.closed_reason:
            st.out.errors.append(f"{st.out.name}: its training showed no step within {timeout:g} s of its Start")
            return False
        await asyncio.sleep(0.2)
    return True


async def trainings_ended(pids: list[int], timeout: float) -> bool:
    """Wait until the server processes ``pids`` have no child left (their trainings ended), at most ``timeout`` s."""
    end = time.monotonic() + timeout
    while any(descendants(p) for p in pids):
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(0.5)
    return True


async def _flood_after_trainers(s: Settings, students: list[Student], deadline: float) -> FloodOutcome:
    """The flood, from when every trainer has pressed Start (at most ``timeout`` s after the load began): the
    server's training slots go first come, first served, so a flood that came first would hold one, and the class's
    trainings, whose speed the report judges, would meet "Server busy" (docs/LIMITS.md)."""
    end = time.monotonic() + s.timeout
    trainers = [st for st in students if st.train_steps is not None]
    while time.monotonic() < end and not all(st.out.training_started or st.out.busy or st.out.errors
                                              for st in trainers):
        await asyncio.sleep(0.2)
    return await run_flood_process(s.port, s.flood, deadline, s.timeout, s.seed)


async def loop_lag(lags: list[float], until: float, every: float = 0.05) -> None:
    """How late this generator's own event loop wakes up (seconds past ``every``) until ``until``: a busy generator
    delays its reading of the server's answers, and the pages' times would include that delay."""
    while time.monotonic() < until:
        t = time.monotonic()
        await asyncio.sleep(every)
        lags.append(time.monotonic() - t - every)


def _merge(outs: list[Outcome]) -> dict:
    times: dict[str, list[float]] = {}
    for label in step_labels() + list(TRAIN_LABELS):
        for o in outs:
            if o.times.get(label):
                times.setdefault(label, []).extend(o.times[label])
    return times


async def run_load_test(s: Settings) -> dict:
    """All three phases; returns the report dict (see ``scripts/loadtest.py --json``)."""
    rng = random.Random(s.seed)
    pids = list(s.pids) or [p for p in [find_server_pid(s.port)] if p]
    load_before = [round(x, 2) for x in os.getloadavg()]
    extra: list[Outcome] = []
    if s.warmup:
        extra.append(await warm_up(s.port, s.timeout))
    solos: list[float] = []  # steps/s of the solo training before the load and (phase 4) after it
    if s.trainings > 0 and s.solo_seconds > 0:
        before, out = await solo_training(s.port, s.solo_seconds, s.timeout)
        extra.append(out)
        solos += [before] if before else []

    monitor = ServerMonitor(pids)
    rss_start = monitor.now()
    own_cpu, own_t = time.process_time(), time.monotonic()  # the generator's own CPU (it shares the machine)
    deadline = time.monotonic() + s.seconds
    taken: set[str] = {WARMUP_MARKER, SOLO_MARKER}
    students = [Student(f"s{i:02d}", s.port, new_marker(rng, taken), rng=random.Random(rng.random()),
                        think=s.think, deadline=deadline, timeout=s.timeout, rounds=s.rounds,
                        train_steps=TRAIN_STEPS_BASE + 10 * i if i < s.trainings else None)
                for i in range(s.sessions)]
    ramp = min(s.ramp, s.seconds / 2)
    mon_task = asyncio.create_task(monitor.run(s.seconds + 2 * s.timeout + 60))
    lags: list[float] = []
    lag_task = asyncio.create_task(loop_lag(lags, deadline))
    tasks = [asyncio.create_task(st.run(ramp * i / max(1, s.sessions))) for i, st in enumerate(students)]
    flooding = s.flood is not None and s.flood.sessions > 0
    flood_task = asyncio.create_task(_flood_after_trainers(s, students, deadline)) if flooding else None
    done, pending = await asyncio.wait(tasks, timeout=s.seconds + 2 * s.timeout + 30)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    flood = await flood_task if flood_task is not None else None
    monitor.stop()
    await mon_task
    await lag_task
    own = 100.0 * (time.process_time() - own_cpu) / max(1e-9, time.monotonic() - own_t)
    if solos:  # phase 4, after the load's trainings have ended (their processes gone)
        ended = await trainings_ended(pids, EVENT_TIMEOUTS * s.timeout)
        after, out = await solo_training(s.port, s.solo_seconds, s.timeout)
        if not ended:
            out.errors.append(f"the load's trainings still ran {EVENT_TIMEOUTS * s.timeout:g} s after the load; the "
                              "solo run after it trained beside them")
        extra.append(out)
        solos += [after] if after else []
    crashed = [f"{st.out.name}: {t.exception()!r}" for st, t in zip(students, tasks)
               if t in done and t.exception() is not None]
    rep = _report(s, students, extra, monitor, rss_start, solos, pids, load_before, crashed, len(pending), flood)
    rep["generator_cpu_pct_mean"] = round(own, 1)
    t0 = deadline - s.seconds
    events = [e for st in students for e in st.out.events]
    flood_events = [tuple(e) for e in flood.events] if flood is not None else []
    rep["windows"] = windows(events, flood_events, t0)
    if s.timeline:
        write_timeline(s.timeline, events + flood_events, t0)
    lags.sort()
    rep["generator_loop_lag_s"] = ({"p95": round(lags[int(0.95 * (len(lags) - 1))], 3), "max": round(lags[-1], 3)}
                                   if lags else None)
    return rep


def _report(s: Settings, students: list[Student], extra: list[Outcome], monitor: ServerMonitor,
            rss_start, solos: list[float], pids, load_before, crashed: list[str], stuck: int,
            flood: FloodOutcome | None = None) -> dict:
    outs = [st.out for st in students]
    every = outs + extra
    errors = [e for o in every for e in o.errors] + crashed + [f"{stuck} session(s) did not finish in time"] * bool(stuck)
    exceptions = [e for o in every for e in o.exceptions]
    leaks = [e for o in every for e in o.leaks] + (flood.leaks if flood is not None else [])  # the flood's too
    if not any(o.own_text_seen + o.own_text_missing for o in outs):
        leaks.append("not checked: no session reached a page where it types (give it more --seconds)")
    trainers = [st for st in students if st.train_steps is not None]
    speeds = [st.steps_per_second() for st in trainers if st.out.busy == 0]
    measured = [x for x in speeds if x is not None]
    yardstick = sum(solos) / len(solos) if solos else None
    ratio = round(min(measured) / yardstick, 3) if yardstick and measured else None
    pages = page_stats(_merge(outs))
    rss_max = max(monitor.rss) if monitor.rss else None
    rep = {
        "pages": pages,
        "errors": len(errors),
        "exceptions": len(exceptions),
        "server_rss_mb": round(rss_max, 1) if rss_max is not None else None,
        "training_speed_vs_solo": ratio,
        "isolation_ok": not leaks,
        "sessions": s.sessions, "seconds": s.seconds, "trainings": s.trainings, "think": list(s.think),
        "server_pids": pids,
        "server_rss_mb_start": round(rss_start, 1) if rss_start is not None else None,
        "server_cpu_pct_mean": round(sum(monitor.cpu_pct) / len(monitor.cpu_pct), 1) if monitor.cpu_pct else None,
        "server_cpu_pct_max": round(max(monitor.cpu_pct), 1) if monitor.cpu_pct else None,
        "children_rss_mb": round(max(monitor.child_rss), 1) if monitor.child_rss else None,
        "children_cpu_pct_mean": (round(sum(monitor.child_cpu_pct) / len(monitor.child_cpu_pct), 1)
                                  if monitor.child_cpu_pct else None),
        "total_rss_mb": (round(max(a + b for a, b in zip(monitor.rss, monitor.child_rss)), 1)
                         if monitor.rss and monitor.child_rss else (round(rss_max, 1) if rss_max is not None else None)),
        "requests": sum(o.requests for o in outs),
        "busy": sum(o.busy for o in outs),
        "own_text_checks": sum(o.own_text_seen + o.own_text_missing for o in outs),
        "training": {"solo_steps_per_s": round(yardstick, 2) if yardstick else None,
                     "solo_runs": [round(x, 2) for x in solos],
                     "steps_per_s": [round(x, 2) if x is not None else None for x in speeds],
                     "progress_seen": [len(st.out.steps) for st in trainers]},
        "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "error_samples": errors[:10],
        "exception_samples": exceptions[:10],
        "leak_samples": leaks[:10],
    }
    if flood is not None:  # the flood's own numbers; everything above is the students'
        rep["flood"] = flood_report(s.flood, flood, s.seconds)
    rep["targets"] = _targets(rep)
    return rep


def _targets(rep: dict) -> dict[str, bool]:
    """The issue's targets that this run can judge (p95 over every step it measured but the Train page's)."""
    p95 = [v["p95"] for k, v in rep["pages"].items() if k not in TRAIN_LABELS]
    out = {f"p95 <= {TARGET_P95} s (every page but Train)": bool(p95) and max(p95) <= TARGET_P95,
           "0 exceptions": rep["exceptions"] == 0,
           "0 errors": rep["errors"] == 0,
           # the server and the processes it started (its trainings), together
           f"RSS <= {TARGET_RSS_MB} MB": rep["total_rss_mb"] is not None and rep["total_rss_mb"] <= TARGET_RSS_MB,
           "isolation": rep["isolation_ok"]}
    if rep["trainings"]:
        r = rep["training_speed_vs_solo"]
        out[f"trainings >= {TARGET_TRAIN_RATIO:.0%} of solo"] = r is not None and r >= TARGET_TRAIN_RATIO
    return out
