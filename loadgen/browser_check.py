"""Validate the load generator's times against a real browser: one session, the same visit, both ways.

    python -m loadgen.browser_check --port P [--rounds 3] [--json]

Against a server already running on 127.0.0.1:P, alternately (``rounds`` times each):

* **chromium** (Debian's, through playwright, headless) opens ``/`` and follows the visit by clicking the
  sidebar's page menu and typing into the Attention and Predict pages (Ctrl+Enter). Two times per step:
  *protocol*, from the ``rerun_script`` frame chromium sends to the ``script_finished`` frame it receives
  (read from the websocket frames, so measured exactly as the generator measures), and *drawn*, from the
  click or key press until the app is no longer running and every visible plotly chart has drawn its SVG;
* **generator**: one ``loadgen.student.Student`` with no think time follows the same visit.

One untimed generator visit warms the server up first.

Prints per step the medians of the three; docs/BENCH.md has the comparison. Needs /usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from loadgen import HOST
from loadgen.student import ATTENTION_INPUT, PREDICT_INPUT, VISIT, Student, new_marker

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TITLES = {"": "Overview", "data_tokens": "Data & tokens", "masking_nsp": "Masking & NSP", "attention": "Attention",
          "predict": "Predict", "embeddings": "Embeddings"}
_DRAWN_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  for (const el of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    if (el.offsetParent !== null && !el.querySelector('.main-svg')) return false;
  }
  return true;
}"""


class _Frames:
    """Decodes chromium's websocket frames: when the last rerun_script left and its full run finished."""

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
        if msg.WhichOneof("type") == "rerun_script" and not msg.rerun_script.fragment_id:
            self.sent_at, self.finished_at = time.perf_counter(), None

    def _received(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
            self.finished_at = time.perf_counter()

    def protocol_seconds(self) -> float | None:
        if self.sent_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.sent_at


def _browser_round(port: int, marker: str, timeout_ms: int = 120_000) -> dict[str, tuple[float, float]]:
    """One chromium visit; step label -> (protocol seconds, drawn seconds)."""
    from playwright.sync_api import sync_playwright

    out: dict[str, tuple[float, float]] = {}
    frames = _Frames()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.set_default_timeout(timeout_ms)
            page.on("websocket", frames.attach)

            def step(label: str, action) -> None:
                t0 = time.perf_counter()
                action()
                page.wait_for_timeout(50)  # let the click's rerun_script leave before polling the state
                page.wait_for_function(_DRAWN_JS, timeout=timeout_ms, polling=20)
                drawn = time.perf_counter() - t0
                deadline = time.perf_counter() + 10
                while frames.protocol_seconds() is None and time.perf_counter() < deadline:
                    page.wait_for_timeout(20)
                out[label] = (frames.protocol_seconds() or float("nan"), drawn)

            step("Overview", lambda: page.goto(f"http://{HOST}:{port}/"))
            nav = page.locator('[data-testid="stSidebarNav"] a')
            for label, path, action in VISIT[1:]:
                step(label, lambda path=path: nav.filter(has_text=TITLES[path]).first.click())
                if action == "type":
                    if label == "Attention":
                        box, text = ATTENTION_INPUT, f"the cat {marker} sits on the mat ."
                    else:
                        box, text = PREDICT_INPUT, f"the cows [MASK] the hay near the {marker} ."
                    area = page.get_by_label(box)

                    def type_and_submit(area=area, text=text):
                        area.fill(text)
                        area.press("Control+Enter")
                    step(f"{label}: typed", type_and_submit)
        finally:
            browser.close()
    return out


async def _generator_round(port: int, marker: str) -> dict[str, float]:
    st = Student("check", port, marker, rng=random.Random(0), think=(0.0, 0.0),
                 deadline=time.monotonic() + 600, rounds=1)
    out = await st.run()
    if out.errors or out.exceptions:
        raise RuntimeError(f"generator round failed: {out.errors + out.exceptions}")
    return {label: xs[0] for label, xs in out.times.items()}


def compare(port: int, rounds: int) -> dict:
    """``rounds`` alternating browser and generator visits; medians per step."""
    browser: dict[str, list[tuple[float, float]]] = {}
    gen: dict[str, list[float]] = {}
    rng, taken = random.Random(1), set()
    asyncio.run(_generator_round(port, new_marker(rng, taken)))  # warm-up, not counted
    for _ in range(rounds):
        for label, v in _browser_round(port, new_marker(rng, taken)).items():
            browser.setdefault(label, []).append(v)
        for label, v in asyncio.run(_generator_round(port, new_marker(rng, taken))).items():
            gen.setdefault(label, []).append(v)
    rows = {}
    for label in browser:
        rows[label] = {"generator": round(statistics.median(gen.get(label, [float("nan")])), 3),
                       "browser_protocol": round(statistics.median(v[0] for v in browser[label]), 3),
                       "browser_drawn": round(statistics.median(v[1] for v in browser[label]), 3)}
    return {"rounds": rounds, "steps": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not (1 <= a.port <= 65535 and 1 <= a.rounds <= 20):
        p.error("--port must be 1..65535 and --rounds 1..20")
    res = compare(a.port, a.rounds)
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"{'step':<20}{'generator s':>13}{'chromium protocol s':>21}{'chromium drawn s':>18}")
    for label, r in res["steps"].items():
        print(f"{label:<20}{r['generator']:>13.3f}{r['browser_protocol']:>21.3f}{r['browser_drawn']:>18.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
