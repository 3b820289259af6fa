"""Load test of a running BERT explorer server: N simulated students over Streamlit's websocket protocol.

    python scripts/loadtest.py --sessions 100 --seconds 120 --trainings 2 [--json]

starts one server process (``streamlit run app.py`` from this checkout, or ``--script serve.py``: app.py behind
the client gate; headless, on a free 127.0.0.1 port, with its own temporary runs folder), runs the load test against it and stops it. To test a server that is
already running (another checkout, a proxy in front of several processes), give its ``--port P``.

Only 127.0.0.1 is contacted. Prints a table (or one JSON object with --json) of the per-page times from
request to the script's finish (p50, p95, max), errors, exceptions, the server's RSS and CPU, the
trainings' speed against one training alone, whether every session saw only its own text and run, the
load generator's own CPU and the load average before and after. Exit status: 0 when there were no errors,
no exceptions and isolation held; 1 otherwise; 2 for bad arguments, when no server answers on the port or
when the server it starts does not come up. See docs/BENCH.md ("Classroom load test").

    python scripts/loadtest.py --sessions 100 --seconds 120 --trainings 2 --flood 300

adds the flood (loadgen/flood.py): one client address, 127.0.0.2 unless --flood-address says otherwise, opens 300
sessions beside the students and presses Start in a loop; the report gives its numbers apart from the students'
(docs/CLASSROOM.md, "One client cannot starve the class").
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.report import format_table  # noqa: E402 - stdlib only; loadgen.runner (streamlit) after the args

MAX_SESSIONS = 500
MAX_SECONDS = 3600.0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # "error: ..." and exit 2, like the bertcore CLI
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)


def _think(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--think takes MIN,MAX in seconds, e.g. 2,8 (got {text!r})") from None
    if not (0 <= lo <= hi <= 600):
        raise argparse.ArgumentTypeError(f"--think needs 0 <= MIN <= MAX <= 600 (got {text!r})")
    return lo, hi


def _ip(text: str) -> bool:
    try:
        return str(ipaddress.ip_address(text)) == text and text != "127.0.0.1"
    except ValueError:
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0,
                   help="port of a running server on 127.0.0.1 (default: start one from this checkout)")
    p.add_argument("--script", choices=("app.py", "serve.py"), default="serve.py",
                   help="what the started server runs: serve.py (the default: app.py behind the client gate, "
                        "explorer/session/client_gate.py, as the deployments start it) or app.py")
    p.add_argument("--sessions", type=int, required=True, help="simulated students (browser tabs)")
    p.add_argument("--seconds", type=float, required=True, help="length of the load phase")
    p.add_argument("--trainings", type=int, required=True,
                   help="how many of the sessions start a training (the server's cap is BERTCORE_MAX_TRAININGS)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--timeline", default="", metavar="CSV",
                   help="write every request of the load phase (the students' and the flood's) to this CSV file: "
                        "its start in seconds after the load began, seconds, who, what")
    p.add_argument("--think", type=_think, default=(5.0, 15.0), metavar="MIN,MAX",
                   help="think time before each action, uniform in seconds (default 5,15)")
    p.add_argument("--ramp", type=float, default=10.0, help="seconds over which the sessions start (default 10)")
    p.add_argument("--solo-seconds", type=float, default=20.0,
                   help="length of the solo-training baseline, run before and again after the load (default 20 each; 0 skips it)")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed pass over the pages")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one request may take (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed of the think times and marker words")
    p.add_argument("--pid", type=int, action="append", default=[],
                   help="server process to sample (repeat for several, e.g. behind a proxy); default: the "
                        "process listening on --port")
    p.add_argument("--rounds", type=int, default=0,
                   help="each student goes round the pages this many times, then leaves (default 0: until --seconds)")
    p.add_argument("--flood", type=int, default=0, metavar="N",
                   help="one client address opens N sessions beside the students and presses Start in a loop")
    p.add_argument("--flood-address", default="127.0.0.2", metavar="IP",
                   help="the flood's address: a loopback address other than 127.0.0.1 is its connections' source; "
                        "any other is sent as X-Forwarded-For from 127.0.0.1, as a proxy would (default 127.0.0.2)")
    p.add_argument("--flood-think", type=_think, default=(0.0, 0.0), metavar="MIN,MAX",
                   help="the flood's pause between requests, uniform in seconds (default 0,0: a tight loop)")
    p.add_argument("--flood-nice", type=int, default=0, metavar="N",
                   help="the flood process's niceness, 0..19 (an attacker's client runs on a machine of its own; on "
                        "this one it shares the server's cores; default 0)")
    p.add_argument("--flood-forge", action="store_true",
                   help="each flood session from a loopback source also sends a forged X-Forwarded-For")
    a = p.parse_args(argv)
    checks = [
        (0 <= a.port <= 65535, f"--port must be 1..65535, or 0 to start a server (got {a.port})"),
        (1 <= a.sessions <= MAX_SESSIONS, f"--sessions must be 1..{MAX_SESSIONS} (got {a.sessions})"),
        (0 < a.seconds <= MAX_SECONDS, f"--seconds must be > 0 and <= {MAX_SECONDS:.0f} (got {a.seconds:g})"),
        (0 <= a.trainings <= a.sessions, f"--trainings must be 0..--sessions (got {a.trainings})"),
        (0 <= a.ramp <= MAX_SECONDS, f"--ramp must be 0..{MAX_SECONDS:.0f} (got {a.ramp:g})"),
        (0 <= a.solo_seconds <= 600, f"--solo-seconds must be 0..600 (got {a.solo_seconds:g})"),
        (1 <= a.timeout <= 600, f"--timeout must be 1..600 (got {a.timeout:g})"),
        (0 <= a.rounds <= 1000, f"--rounds must be 0..1000 (got {a.rounds})"),
        (all(p > 0 for p in a.pid), "--pid must be a process id"),
        (0 <= a.flood <= MAX_SESSIONS, f"--flood must be 0..{MAX_SESSIONS} (got {a.flood})"),
        (not a.timeline or Path(a.timeline).resolve().parent.is_dir(),
         f"--timeline: the folder of {a.timeline!r} does not exist"),
        (0 <= a.flood_nice <= 19, f"--flood-nice must be 0..19 (got {a.flood_nice})"),
        (_ip(a.flood_address), f"--flood-address must be an IP address other than 127.0.0.1 (got {a.flood_address!r})"),
    ]
    for ok, msg in checks:
        if not ok:
            p.error(msg)
    return a


def _start_server(script: str = "app.py"):
    """A headless server of this checkout on a free port (bench.harness.AppServer: its own runs folder); ``script``
    app.py or serve.py (app.py behind the client gate)."""
    import tempfile

    from bench.harness import AppServer

    log = Path(tempfile.mkdtemp(prefix="bertx-loadtest-")) / "server.log"
    try:
        return AppServer(log, script=script).start(timeout=120)
    except RuntimeError as e:
        sys.stderr.write(f"error: the server did not start ({e}); its log: {log}\n")
        return None


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    from loadgen.flood import FloodSettings
    from loadgen.runner import Settings, run_load_test, server_ready

    server = None
    if a.port == 0:
        server = _start_server(a.script)
        if server is None:
            return 2
        a.port = server.port
    try:
        if not asyncio.run(server_ready(a.port)):
            sys.stderr.write(f"error: no Streamlit server answers on 127.0.0.1:{a.port}/_stcore/health; start one "
                             f"with `streamlit run app.py --server.port {a.port}` first, or leave --port out\n")
            return 2
        s = Settings(port=a.port, sessions=a.sessions, seconds=a.seconds, trainings=a.trainings, think=a.think,
                     ramp=a.ramp, solo_seconds=a.solo_seconds, warmup=not a.no_warmup, timeout=a.timeout,
                     seed=a.seed, rounds=a.rounds, pids=tuple(a.pid), timeline=a.timeline,
                     flood=FloodSettings(a.flood, a.flood_address, a.flood_think, ramp=a.ramp,
                                         forge=a.flood_forge, nice=a.flood_nice) if a.flood else None)
        rep = asyncio.run(run_load_test(s))
    finally:
        if server is not None:
            server.stop()
    rep["server_started_by_the_test"] = server is not None
    print(json.dumps(rep) if a.json else format_table(rep))
    return 0 if rep["errors"] == 0 and rep["exceptions"] == 0 and rep["isolation_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
