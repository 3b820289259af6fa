"""Where a loaded server's CPU goes: ``python -m bench.experiments.load_profile --sessions 40 --seconds 90 --trainings 2``.

Starts one server of this checkout (``bench.harness.AppServer``), records it with py-spy (``pip install py-spy``;
sampling another process needs root or ptrace rights) while ``scripts/loadtest.py`` drives it, and prints:

* the samples of each kind of thread: page scripts (Streamlit's ScriptRunner threads), trainings, the server's
  event loop (websockets), other;
* the page scripts' samples by what they were doing (building plotly figures, serialising them in
  ``st.plotly_chart``, dataframes, Streamlit's own element and message work, torch, our own code ...) and by page;
* the functions of this project with the most samples (inclusive).

With ``--gil`` only the thread holding the GIL is sampled: then the shares are those of the one core that
Python code of the server can use at a time, which is what the pages' latencies queue for. ``--raw FILE``
summarises a py-spy raw file recorded earlier instead; ``--port P`` profiles a server that is already running
(e.g. an older checkout, for a before/after comparison) instead of starting one. Writes the raw samples and the load test's JSON to
``--out`` (default: a temporary folder). No timing is asserted; docs/BENCH.md has the figures.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import REPO, AppServer
from loadgen.report import find_server_pid

PAGES = ("overview", "data_tokens", "masking_nsp", "forward", "attention", "predict", "embeddings", "train",
         "positional_encoding", "compare", "finetune", "probes", "lens_patching", "features")
_LINE = re.compile(r":\d+\)$")
_BARE = re.compile(r" \((\w+)\.py[:)]")  # py-spy names the page scripts without their folder


def _own(frame: str) -> bool:
    """A frame of this project's code: bertcore, explorer, app.py or a page script."""
    if any(x in frame for x in ("explorer/", "app_pages/", "bertcore/")):
        return True
    m = _BARE.search(frame)
    return m is not None and (m.group(1) in PAGES or m.group(1) == "app")


def _thread_kind(stack: str) -> str:
    if "_run_script_thread" in stack:
        return "page scripts"
    if "training_run.py" in stack or "bertcore/training/" in stack:
        return "trainings"
    if "asyncio" in stack or "uvicorn" in stack or "starlette" in stack:
        return "event loop"
    return "other"


def _activity(frames: list[str]) -> str:
    """What a page-script sample was doing, judged from its innermost frames outwards."""
    in_chart = any("PlotlyMixin.plotly_chart" in f for f in frames)
    for f in reversed(frames):
        if "plotly/" in f or "_plotly_utils" in f:
            return "plotly: serialise in st.plotly_chart" if in_chart else "plotly: build figures"
        if any(x in f for x in ("narwhals", "pyarrow", "pandas/", "arrow.py", "dataframe_util")):
            return "dataframes (pandas, arrow)"
        if "torch/" in f or "bertcore/model/" in f:
            return "torch"
        if "numpy/" in f:
            return "numpy"
        if "magic.py" in f or "(ast.py" in f:
            return "compiling page scripts"
    if in_chart:
        return "st.plotly_chart, other"
    for f in reversed(frames):
        if "streamlit/" in f:
            return "streamlit: elements, widgets, messages"
        if _own(f):
            return "own code"
    return "other"


def _page(frames: list[str]) -> str:
    for f in frames:
        m = re.search(r"<module> \((?:app_pages/)?(\w+)\.py", f)
        if m and m.group(1) in PAGES:
            return m.group(1)
    stack = ";".join(frames)
    return "sidebar" if "render_sidebar" in stack else "app.py and Streamlit's run"


def summarise(raw: Path, top: int = 25) -> dict:
    """Shares (0..1) of all samples by thread kind, of page-script samples by activity and page, and the
    project's functions with the most page-script samples (inclusive)."""
    kinds, acts, pages, funcs = (collections.Counter() for _ in range(4))
    total = scripts = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        total += n
        kind = _thread_kind(stack)
        kinds[kind] += n
        if kind != "page scripts":
            continue
        scripts += n
        frames = stack.split(";")
        acts[_activity(frames)] += n
        pages[_page(frames)] += n
        for f in {_LINE.sub(")", f) for f in frames}:
            if _own(f) and not f.startswith("<module> (app.py"):
                funcs[f] += n

    def share(c: collections.Counter, of: int) -> dict:
        return {k: round(v / max(1, of), 4) for k, v in c.most_common()}

    return {"samples": total, "threads": share(kinds, total), "page_script_samples": scripts,
            "activities": share(acts, scripts), "pages": share(pages, scripts),
            "functions": dict(list(share(funcs, scripts).items())[:top])}


def format_summary(s: dict) -> str:
    out = [f"{s['samples']} samples; by thread: " + ", ".join(f"{k} {v:.1%}" for k, v in s["threads"].items()),
           "", f"page scripts ({s['page_script_samples']} samples), by activity:"]
    out += [f"  {v:6.1%}  {k}" for k, v in s["activities"].items()]
    out += ["", "page scripts by page:"] + [f"  {v:6.1%}  {k}" for k, v in s["pages"].items()]
    out += ["", "functions of this project (inclusive, share of page-script samples):"]
    out += [f"  {v:6.1%}  {k}" for k, v in s["functions"].items()]
    return "\n".join(out)


def profile(sessions: int, seconds: float, trainings: int, rate: int, gil: bool, out: Path,
            loadtest_args: list[str], port: int = 0) -> dict:
    if shutil.which("py-spy") is None:
        raise SystemExit("error: py-spy is not installed (pip install py-spy)")
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "profile.txt"
    server = AppServer(out / "server.log").start(timeout=120) if not port else None
    pid = server.proc.pid if server else find_server_pid(port)
    port = server.port if server else port
    if not pid:
        raise SystemExit(f"error: no server process listens on 127.0.0.1:{port}")
    try:
        cmd = ["py-spy", "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
               "--output", str(raw), "--nonblocking"] + (["--gil"] if gil else [])
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            lt = subprocess.run([sys.executable, str(REPO / "scripts" / "loadtest.py"), "--port", str(port),
                                 "--sessions", str(sessions), "--seconds", str(seconds), "--trainings", str(trainings),
                                 "--json", *loadtest_args], cwd=REPO, capture_output=True, text=True,
                                timeout=seconds + 900)
        finally:
            spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
            spy.wait(timeout=60)
    finally:
        if server is not None:
            server.stop()
    report = json.loads(lt.stdout) if lt.stdout.strip().startswith("{") else {"stderr": lt.stderr[-2000:]}
    (out / "loadtest.json").write_text(json.dumps(report, indent=1))
    return {"loadtest": report, "profile": summarise(raw), "raw": str(raw)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--seconds", type=float, default=90)
    p.add_argument("--trainings", type=int, default=2)
    p.add_argument("--rate", type=int, default=50, help="py-spy samples per second (default 50)")
    p.add_argument("--gil", action="store_true", help="sample only the thread that holds the GIL")
    p.add_argument("--out", type=Path, default=None, help="folder for the raw samples and the load test's JSON")
    p.add_argument("--raw", type=Path, default=None, help="only summarise this py-spy raw file")
    p.add_argument("--port", type=int, default=0, help="profile the server already running on this port")
    p.add_argument("--json", action="store_true")
    a, rest = p.parse_known_args(argv)
    if a.raw is not None:
        res = {"profile": summarise(a.raw)}
    else:
        res = profile(a.sessions, a.seconds, a.trainings, a.rate, a.gil,
                      a.out or Path(tempfile.mkdtemp(prefix="bertx-profile-")), rest, a.port)
    if a.json:
        print(json.dumps(res))
    else:
        lt = res.get("loadtest")
        if lt and "pages" in lt:
            from loadgen.report import format_table
            print(format_table(lt), end="\n\n")
        print(format_summary(res["profile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
