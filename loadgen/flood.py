"""The flood: one client address that opens many sessions and presses Start in a loop, beside the class (issue 45).

Every session of the flood connects from one address of its own. By default that is another loopback address,
127.0.0.2 (all of 127.0.0.0/8 is loopback on Linux): the server sees a TCP peer that is not 127.0.0.1, as it would
see a student's machine, and no header is trusted for it. With ``forwarded_for`` the flood connects from 127.0.0.1
and names its address in ``X-Forwarded-For`` instead, as nginx on the same machine does for a real client (the
server trusts that header from 127.0.0.1 only, explorer/session/client_limits.py). ``forge`` makes every session of a
127.0.0.2 flood send an ``X-Forwarded-For`` of its own as well, the attacker's trick: the server must ignore it.

Each session of the flood, in a loop until the deadline and without think time (``think``, default none):

* opens the app, and opens it again whenever the client gate (serve.py) turns the page load (HTTP 429) or the
  websocket (HTTP 403) away, or holds it past the timeout (its refusal delay grows to a minute); a session the
  server refuses (the caps' message instead of the page) asks for the page again, as a script that reloads would;
* an admitted session opens the Train page and presses Start; when a training started, it presses Stop at once,
  so that its next Start can start another one (the costliest thing a Start can ask for: a new training process).

Every answer is sorted: turned away by the gate, refused by the client's caps (their message), "Server busy", a
training started, or something else (an error). The flood's own request times, errors and counts are reported
apart from the class's.

The flood runs in a process of its own (``run_flood_process``: ``python -m loadgen.flood SETTINGS``), as an
attacker's client runs on a machine of its own: in the students' process, its 300 tight loops held the event loop
that times the students' pages, and the students' figures then measured the load generator as well as the server.
It still shares this machine's cores with the server; ``nice`` lowers its priority there (0: none).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.protocol import RunResult, StreamlitTab
from loadgen.student import MARKER_RE, STEPS_SLIDER

REFUSED = b"from your network address"  # in each of the caps' messages (explorer.session.client_limits), in English
BUSY = b"Server busy"
ALREADY = b"already running in this workspace"  # Start while its own training has not stopped yet
GATE_REFUSED = re.compile(r"answered HTTP 429|HTTP 403")  # the client gate's answers (explorer.session.client_gate)
FLOOD_STEPS = 3000  # the flood's runs: long enough not to end before its Stop


@dataclass
class FloodSettings:
    sessions: int = 0
    address: str = "127.0.0.2"  # a loopback address: the source of its connections; anything else: X-Forwarded-For
    think: tuple[float, float] = (0.0, 0.0)
    ramp: float = 10.0
    delay: float = 0.0  # seconds after the class's first student
    forge: bool = False  # a 127.0.0.x flood also sends a forged X-Forwarded-For per session
    nice: int = 0  # the flood process's niceness (its client would be on another machine; here it shares the cores)

    @property
    def loopback_source(self) -> bool:
        return self.address.startswith("127.") and self.address != "127.0.0.1"


@dataclass
class FloodOutcome:
    """What the whole flood did and got (one object for all its sessions)."""

    sessions_opened: int = 0
    sessions_admitted: int = 0
    requests: int = 0
    refused: int = 0  # answers that were the caps' message (sessions, page runs, Starts)
    gate_refused: int = 0  # page loads (HTTP 429) and websockets (HTTP 403) the client gate turned away
    gate_held: int = 0  # page loads still unanswered at the timeout (the gate's refusal delay grows to 60 s)
    starts_pressed: int = 0
    starts_refused: int = 0  # Start answered with the caps' message
    starts_busy: int = 0  # Start answered "Server busy"
    starts_already: int = 0  # Start answered "already running" (its last training had not stopped yet)
    trainings_started: int = 0
    times: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    events: list = field(default_factory=list)  # (start, seconds, session, what) per request, monotonic time
    cpu_seconds: float = 0.0  # the flood process's own CPU time (its client work, not the server's)
    niceness: int = 0  # the flood process's niceness as it ran

    def note(self, name: str, r: RunResult, where: str) -> bool:
        self.requests += 1
        self.events.append((time.monotonic() - r.seconds, r.seconds, name, where + ("" if r.ok else " (failed)")))
        if r.ok:
            self.times.append(r.seconds)
        else:
            self.errors.append(f"{name} {where}: {r.error}")
        self.errors.extend(f"{name} {where}: exception {e}" for e in r.exceptions)
        return r.ok


class FloodSession:
    """One tab of the flood."""

    def __init__(self, i: int, port: int, s: FloodSettings, out: FloodOutcome, rng: random.Random,
                 deadline: float, timeout: float):
        self.name = f"flood{i:03d}"
        self.s, self.out, self.rng, self.deadline = s, out, rng, deadline
        headers = {}
        if not s.loopback_source:
            headers["X-Forwarded-For"] = s.address
        elif s.forge:
            headers["X-Forwarded-For"] = f"198.51.100.{i % 250 + 1}"  # forged: a different "client" per session
        self.tab = StreamlitTab(port, timeout=timeout, max_seconds=deadline - time.monotonic() + timeout + 30,
                                on_payload=self._scan, source=s.address if s.loopback_source else "",
                                headers=headers)

    def _scan(self, data: bytes) -> None:
        for m in set(MARKER_RE.findall(data)):
            self.out.leaks.append(f"{self.name} received a student's text {m.decode()!r}")

    def _refused(self) -> bool:
        return REFUSED in self.tab.shown_bytes()

    async def _pause(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        lo, hi = self.s.think
        if hi > 0:
            await asyncio.sleep(min(left, self.rng.uniform(lo, hi)))
        else:
            await asyncio.sleep(0)
        return time.monotonic() < self.deadline

    async def run(self, start_delay: float) -> None:
        try:
            await asyncio.sleep(max(0.0, start_delay))
            if time.monotonic() >= self.deadline:
                return
            self.out.sessions_opened += 1
            while True:  # the client gate (serve.py) may turn the page load or the websocket away: ask again
                r = await self.tab.open("")
                held = not r.ok and "TimeoutError" in (r.error or "")  # the gate's refusal delay outlasted it
                if r.ok or not (held or GATE_REFUSED.search(r.error or "")):
                    break
                self.out.requests += 1
                self.out.gate_held += held
                self.out.gate_refused += not held
                self.out.events.append((time.monotonic() - r.seconds, r.seconds, self.name,
                                        "open / (held)" if held else "open / (refused)"))
                if not await self._pause():
                    return
            if not self.out.note(self.name, r, "open /"):
                return
            while self._refused() or "train" not in self.tab.pages:  # not let in (yet): ask again
                self.out.refused += self._refused()
                if not await self._pause():
                    return
                if not self.out.note(self.name, await self.tab.reload(""), "reload /"):
                    return
            self.out.sessions_admitted += 1
            await self._start_loop()
        finally:
            await self.tab.close()

    async def _start_loop(self) -> None:
        on_train = False
        for _ in range(100_000):  # bounded; the deadline ends it long before
            if not await self._pause():
                return
            start = self.tab.widget("button", "Start") if on_train else None
            if start is None or start.disabled:  # not on the Train page, or its last training is still stopping
                if not self.out.note(self.name, await self.tab.goto("train"), "open /train"):
                    return
                self.out.refused += self._refused()
                on_train = not self._refused()
                continue
            sliders = {STEPS_SLIDER: FLOOD_STEPS} if self.tab.widget("slider", STEPS_SLIDER) else {}
            self.out.starts_pressed += 1
            if not self.out.note(self.name, await self.tab.interact(sliders=sliders, click="Start"), "press Start"):
                return
            shown = self.tab.shown_bytes()
            stop = self.tab.widget("button", "Stop")
            if REFUSED in shown:  # the client's Start cap, or its page-run cap (then no page was drawn)
                self.out.refused += 1
                self.out.starts_refused += 1
            elif BUSY in shown:
                self.out.starts_busy += 1
            elif ALREADY in shown:
                self.out.starts_already += 1
            elif stop is not None and not stop.disabled:
                self.out.trainings_started += 1
                if not self.out.note(self.name, await self.tab.interact(click="Stop"), "press Stop"):
                    return
                self.out.refused += self._refused()
            # else: a message of the page (e.g. a full workspace): counted as a press, nothing else


async def run_flood(port: int, s: FloodSettings, deadline: float, timeout: float, seed: int = 0) -> FloodOutcome:
    """Every session of the flood, started over ``s.ramp`` seconds after ``s.delay``, until ``deadline``."""
    out = FloodOutcome()
    rng = random.Random(seed + 1_000_003)
    sessions = [FloodSession(i, port, s, out, random.Random(rng.random()), deadline, timeout)
                for i in range(s.sessions)]
    tasks = [asyncio.create_task(fs.run(s.delay + s.ramp * i / max(1, s.sessions)))
             for i, fs in enumerate(sessions)]
    done, pending = await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()) + 2 * timeout + 30)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    out.errors += [f"flood session crashed: {t.exception()!r}" for t in done if t.exception() is not None]
    out.errors += [f"{len(pending)} flood session(s) did not finish in time"] * bool(pending)
    return out


def flood_report(s: FloodSettings, out: FloodOutcome, seconds: float) -> dict:
    """The flood's own numbers, for the report's "flood" entry."""
    times = sorted(out.times)

    def q(p: float):
        return round(times[min(len(times) - 1, int(p * len(times)))], 3) if times else None

    return {
        "sessions": s.sessions, "address": s.address,
        "via": "source address" if s.loopback_source else "X-Forwarded-For from 127.0.0.1",
        "forged_forwarded_for": bool(s.forge and s.loopback_source),
        "sessions_opened": out.sessions_opened, "sessions_admitted": out.sessions_admitted,
        "requests": out.requests, "requests_per_s": round(out.requests / max(1e-9, seconds), 1),
        "refused": out.refused, "gate_refused": out.gate_refused, "gate_held": out.gate_held,
        "starts_pressed": out.starts_pressed, "starts_refused": out.starts_refused,
        "starts_busy": out.starts_busy, "starts_already_running": out.starts_already,
        "trainings_started": out.trainings_started,
        "p50": q(0.5), "p95": q(0.95), "max": round(times[-1], 3) if times else None,
        "errors": len(out.errors), "error_samples": out.errors[:10], "leaks": out.leaks[:10],
        "process_cpu_s": out.cpu_seconds, "nice": out.niceness,
    }


async def run_flood_process(port: int, s: FloodSettings, deadline: float, timeout: float,
                            seed: int = 0) -> FloodOutcome:
    """``run_flood`` in a process of its own (see the module's docstring); its outcome comes back as one JSON line."""
    settings = dataclasses.asdict(s)
    job = {"port": port, "settings": settings, "seconds": max(0.0, deadline - time.monotonic()), "timeout": timeout,
           "seed": seed}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "loadgen.flood", json.dumps(job),
                                                cwd=str(Path(__file__).resolve().parent.parent),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    limit = job["seconds"] + s.delay + 2 * timeout + 90
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=limit)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return FloodOutcome(errors=[f"the flood's process did not end within {limit:.0f} s"])
    lines = stdout.decode(errors="replace").strip().splitlines()
    try:
        got = json.loads(lines[-1])
        return FloodOutcome(**{f.name: got[f.name] for f in dataclasses.fields(FloodOutcome)})
    except (IndexError, ValueError, KeyError, TypeError):
        tail = stderr.decode(errors="replace").strip().splitlines()[-3:]
        return FloodOutcome(errors=[f"the flood's process ended with code {proc.returncode}: " + " | ".join(tail)])


def _child(arg: str) -> int:
    job = json.loads(arg)
    fields = job["settings"]
    fields["think"] = tuple(fields["think"])
    s = FloodSettings(**fields)
    if s.nice:
        os.nice(s.nice)
    out = asyncio.run(run_flood(job["port"], s, time.monotonic() + job["seconds"], job["timeout"], job["seed"]))
    out.cpu_seconds, out.niceness = round(time.process_time(), 2), os.nice(0)
    print(json.dumps(dataclasses.asdict(out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
