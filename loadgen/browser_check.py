"""Validate the load generator's times against a real browser: one session, the same visit, both ways.

    python -m loadgen.browser_check --port P [--rounds 3] [--json]

Against a server already running on 127.0.0.1:P, alternately (``rounds`` times each):

* **chromium** (Debian's, through playwright, headless) opens the app and follows the visit
  (``loadgen.student.VISIT``) by clicking the sidebar's page menu, typing into the text boxes and pressing the
  buttons it names. It loads the app through a ``loadgen.wire.WireRelay``, so three times are taken per step: *wire*, from its ``rerun_script`` passing
  the relay to the ``script_finished`` passing it (the same two moments the generator times on its own
  socket); *devtools*, the same two frames as playwright reports them (their events come through the renderer
  and playwright's event stream, so they arrive late while chromium is busy drawing); and *drawn*, from the click or key press until the
  app is no longer running and every visible plotly chart has drawn its SVG;
* **generator**: one ``StreamlitTab`` (what each simulated student drives) follows the same visit.

For both, the server process's CPU seconds per step (from /proc): the work the server does for a browser's
step and for the generator's step, whatever else the machine is doing.

A first visit of each kind is not counted (it warms the server, and the browser's cache as a student's
first visit does). Chromium keeps one browser context (its cache) for all its visits. A student's browser
draws on the student's machine, so by default the server is pinned to CPU 0 and chromium (niced 19), the
relay and the generator to the other CPUs for the check, and the server's CPUs are given back afterwards;
``--no-pin`` lets them share every core (then chromium's drawing delays the server's runs on a 2-core machine).

Prints per step the medians; docs/BENCH.md has the comparison. Needs /usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from loadgen import HOST
from loadgen.protocol import StreamlitTab
from loadgen.report import find_server_pid, proc_sample
from loadgen.student import VISIT, Type, new_marker
from loadgen.wire import WireRelay

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
_DRAWN_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  for (const el of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    if (el.offsetParent !== null && !el.querySelector('.main-svg')) return false;
  }
  return true;
}"""


class _Frames:
    """Decodes chromium's websocket frames: when the last rerun_script the user caused left and its run (full or a
    fragment's) finished."""

    def __init__(self):
        self.sent_at = None
        self.finished_at = None

    def attach(self, ws) -> None:
        ws.on("framesent", self._sent)
        ws.on("framereceived", self._received)

    def _sent(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = BackMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "rerun_script" and not msg.rerun_script.is_auto_rerun:
            self.sent_at, self.finished_at = time.perf_counter(), None

    def _received(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "script_finished" and msg.script_finished in (
                ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY):
            self.finished_at = time.perf_counter()

    def protocol_seconds(self) -> float | None:
        if self.sent_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.sent_at


def _cpu(pid: int | None) -> float:
    s = proc_sample(pid) if pid else None
    return s[1] if s else float("nan")


def _visit(page, frames: _Frames, port: int, url_port: int, marker: str,
           timeout_ms: int) -> dict[str, tuple[float, ...]]:
    """One visit in an open chromium page (loading ``url_port``: the server's, or a relay's in front of it);
    step label -> (devtools protocol s, drawn s, server CPU s, wall clock at the step's start, at its end)."""
    out: dict[str, tuple[float, ...]] = {}
    pid = find_server_pid(port)

    def step(label: str, action) -> None:
        c0 = _cpu(pid)
        w0 = time.time()
        t0 = time.perf_counter()
        action()
        page.wait_for_timeout(50)  # let the click's rerun_script leave before polling the state
        page.wait_for_function(_DRAWN_JS, timeout=timeout_ms, polling=20)
        drawn = time.perf_counter() - t0
        deadline = time.perf_counter() + 10
        while frames.protocol_seconds() is None and time.perf_counter() < deadline:
            page.wait_for_timeout(20)
        page.wait_for_timeout(200)  # the server's last sends
        out[label] = (frames.protocol_seconds() or float("nan"), drawn, _cpu(pid) - c0, w0, time.time())

    nav = page.locator('[data-testid="stSidebarNav"] a')
    for i, p in enumerate(VISIT):
        if i == 0:
            step(p.label, lambda p=p: page.goto(f"http://{HOST}:{url_port}/{p.path}"))
        else:
            link = nav.filter(has_text=p.label).first
            if not link.is_visible():  # a long menu shows its first entries and a "View more" button
                page.locator('[data-testid="stSidebarNavViewButton"]').first.click()
                link.wait_for(state="visible")
            step(p.label, lambda link=link: link.click())
        for a in p.actions:
            if isinstance(a, Type):
                box = page.get_by_label(a.box)

                def type_and_submit(box=box, text=a.text.format(marker=marker)):
                    box.fill(text)  # a text area submits on Ctrl+Enter, a text input on Enter
                    box.press("Control+Enter" if box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
                step(f"{p.label}: {a.name}", type_and_submit)
            else:
                step(f"{p.label}: {a.name}", lambda a=a: page.get_by_role("button", name=a.button).click())
    return out


def _browser_rounds(port: int, url_port: int, timeout_ms: int = 180_000) -> None:
    """Child process: one chromium and one browser context (its cache warms as a student's does); for each
    marker read from stdin, one visit in a new tab, printed as one JSON line. Ends on an empty line."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            for _ in range(100):  # bounded; the parent asks for rounds + 1
                marker = sys.stdin.readline().strip()
                if not marker:
                    break
                frames = _Frames()
                page = context.new_page()
                page.set_default_timeout(timeout_ms)
                page.on("websocket", frames.attach)
                print(json.dumps(_visit(page, frames, port, url_port, marker, timeout_ms)), flush=True)
                page.close()
        finally:
            browser.close()


async def _generator_round(port: int, marker: str) -> dict[str, tuple[float, float]]:
    """The same visit with one ``StreamlitTab``; step label -> (seconds, server CPU seconds)."""
    pid = find_server_pid(port)
    tab = StreamlitTab(port, timeout=180)
    out: dict[str, tuple[float, float]] = {}

    async def step(label: str, request) -> None:
        c0 = _cpu(pid)
        r = await request
        await asyncio.sleep(0.2)  # the server's last sends, as on the browser side
        if not r.ok or r.exceptions:
            raise RuntimeError(f"generator step {label} failed: {r.error} {r.exceptions}")
        out[label] = (r.seconds, _cpu(pid) - c0)

    try:
        for i, p in enumerate(VISIT):
            await step(p.label, tab.open(p.path) if i == 0 else tab.goto(p.path))
            for a in p.actions:
                request = (tab.interact(texts={a.box: a.text.format(marker=marker)}) if isinstance(a, Type)
                           else tab.interact(click=a.button))
                await step(f"{p.label}: {a.name}", request)
    finally:
        await tab.close()
    return out


def _server_cpus(pid: int | None, cpus: set[int] | None) -> dict[int, set[int]]:
    """Pin every thread of the server to ``cpus`` (its later threads inherit it); returns the old masks.
    ``cpus=None`` only reads them."""
    old: dict[int, set[int]] = {}
    if not pid:
        return old
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return old
    for tid in tids:
        try:
            old[tid] = os.sched_getaffinity(tid)
            if cpus is not None:
                os.sched_setaffinity(tid, cpus)
        except OSError:
            continue  # the thread ended
    return old


def compare(port: int, rounds: int, nice: int = 19, pin: bool = True) -> dict:
    """A warm-up visit of each kind, then ``rounds`` alternating browser and generator visits; medians.

    Chromium loads the app through a ``WireRelay``, so each of its requests is also timed on the wire, at the
    same two moments the generator times its own (rerun_script sent, script_finished received). With ``pin``
    (and at least 2 CPUs) the server runs on CPU 0 and chromium, the relay and the generator on the others: a
    student's browser draws on the student's machine, not on the server's cores."""
    browser: dict[str, list[tuple[float, ...]]] = {}
    gen: dict[str, list[tuple[float, float]]] = {}
    rng, taken = random.Random(1), set()
    cpus = sorted(os.sched_getaffinity(0))
    pin = pin and len(cpus) >= 2
    pid = find_server_pid(port)
    own_cpus = os.sched_getaffinity(0)
    server_cpus = _server_cpus(pid, {cpus[0]} if pin else None)
    if pin:
        os.sched_setaffinity(0, set(cpus[1:]))
    try:
        with WireRelay(port) as relay:
            cmd = [sys.executable, "-m", "loadgen.browser_check", "--port", str(port), "--browser-rounds",
                   "--url-port", str(relay.port)]
            child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: os.nice(nice))
            try:
                for i in range(rounds + 1):
                    child.stdin.write(new_marker(rng, taken) + "\n")
                    child.stdin.flush()
                    line = child.stdout.readline()
                    if not line:
                        raise RuntimeError("the chromium process ended early")
                    g = asyncio.run(_generator_round(port, new_marker(rng, taken)))
                    if i == 0:
                        continue  # warm-up of the server and of the browser's cache
                    for label, (proto, drawn, cpu, w0, w1) in json.loads(line).items():
                        wire = relay.request_seconds(w0, w1)
                        browser.setdefault(label, []).append(
                            (proto, drawn, cpu, float("nan") if wire is None else wire))
                    for label, v in g.items():
                        gen.setdefault(label, []).append(v)
                child.stdin.write("\n")
                child.stdin.flush()
                child.wait(timeout=60)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait(timeout=10)
    finally:
        os.sched_setaffinity(0, own_cpus)
        if pin:
            all_cpus = set().union(*server_cpus.values()) if server_cpus else set(cpus)
            _server_cpus(pid, all_cpus)

    def med(xs):
        return round(statistics.median(xs), 3)

    rows = {}
    for label, b in browser.items():
        g = gen.get(label, [(float("nan"), float("nan"))])
        rows[label] = {"generator": med(v[0] for v in g), "browser_wire": med(v[3] for v in b),
                       "browser_protocol": med(v[0] for v in b), "browser_drawn": med(v[1] for v in b),
                       "server_cpu_generator": med(v[1] for v in g), "server_cpu_browser": med(v[2] for v in b)}
    return {"rounds": rounds, "chromium_nice": nice, "pinned": pin, "steps": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--nice", type=int, default=19, help="niceness of chromium (0..19, default 19)")
    p.add_argument("--no-pin", action="store_true",
                   help="let the server and chromium share every CPU (by default the server gets CPU 0)")
    p.add_argument("--browser-rounds", action="store_true", help=argparse.SUPPRESS)  # internal: the child
    p.add_argument("--url-port", type=int, default=0, help=argparse.SUPPRESS)  # internal: the relay's port
    a = p.parse_args(argv)
    if not (1 <= a.port <= 65535 and 1 <= a.rounds <= 20 and 0 <= a.nice <= 19):
        p.error("--port must be 1..65535, --rounds 1..20 and --nice 0..19")
    if a.browser_rounds:
        _browser_rounds(a.port, a.url_port or a.port)
        return 0
    res = compare(a.port, a.rounds, a.nice, pin=not a.no_pin)
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"{'step':<26}{'generator s':>12}{'chromium wire s':>16}{'devtools s':>11}{'drawn s':>9}"
          f"{'server CPU s: generator':>25}{'/ chromium':>11}")
    for label, r in res["steps"].items():
        print(f"{label:<26}{r['generator']:>12.3f}{r['browser_wire']:>16.3f}{r['browser_protocol']:>11.3f}"
              f"{r['browser_drawn']:>9.3f}{r['server_cpu_generator']:>25.3f}{r['server_cpu_browser']:>11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
