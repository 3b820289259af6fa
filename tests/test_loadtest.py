"""The classroom load generator (scripts/loadtest.py, loadgen/) against a real headless server.

No browser: the generator speaks Streamlit's websocket protocol itself. One server for the module; the
generator runs as a subprocess with 3 sessions going once round the pages (one of them trains), and the
report must show no errors, no exceptions and isolation held. No timing is asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.harness import LOAD, REPO, SLOWDOWN, UPDATE, AppServer, free_port
from loadgen.student import step_labels

pytestmark = pytest.mark.load  # long by nature: a class of sessions for a minute (docs/TESTING.md)

SCRIPT = REPO / "scripts" / "loadtest.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("loadtest")
    srv = AppServer(d / "server.log", runs_dir=d / "runs").start()
    yield srv
    srv.stop()


def _loadtest(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_three_sessions_once_round_the_pages(server):
    r = _loadtest("--port", str(server.port), "--sessions", "3", "--seconds", "90", "--trainings", "1",
                  "--rounds", "1", "--think", "0.1,0.3", "--ramp", "0.5", "--solo-seconds", "0", "--no-warmup",
                  "--json")
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{server.log_tail()}"
    rep = json.loads(r.stdout)
    assert rep["errors"] == 0, rep["error_samples"]
    assert rep["exceptions"] == 0, rep["exception_samples"]
    assert rep["isolation_ok"] is True, rep["leak_samples"]
    # every session typed on Attention and Predict and found its own text there (3 sessions x 2 pages)
    assert rep["own_text_checks"] == 6
    for page in ("Overview", "Data & tokens", "Masking & NSP", "Inside the model", "Inside the model: typed",
                 "Inside the model: Next", "Attention", "Attention: typed", "Predict", "Predict: typed",
                 "Predict: explain", "Embeddings", "Train: start", "Train: stop"):
        assert page in rep["pages"], sorted(rep["pages"])
        s = rep["pages"][page]
        assert 0 < s["p50"] <= s["p95"] <= s["max"]
    assert rep["pages"]["Overview"]["n"] == 3
    assert rep["pages"]["Inside the model: Next"]["n"] == 6  # two Next clicks each
    assert rep["busy"] == 0
    # the server tuned itself for a class on its first page (explorer.server_process.tune_server_process)
    tuned = [ln for ln in server.log_path.read_text(errors="replace").splitlines() if "server process tuned" in ln]
    assert len(tuned) == 1 and " 1 torch thread(s), switch interval 1 ms" in tuned[0], server.log_tail()
    assert int(tuned[0].split("ms, ")[1].split(" objects")[0].replace(",", "")) > 100_000  # torch & co. frozen
    # the one training ran (the trainer saw its own progress bars), and the report found the server process
    assert len(rep["training"]["progress_seen"]) == 1 and rep["training"]["progress_seen"][0] >= 1
    assert rep["server_pids"] == [server.proc.pid]
    assert rep["server_rss_mb"] > 50
    # the training ran in its own process below the server (bertcore.launch.worker): sampled apart, counted in
    # the total that the RSS target judges
    assert rep["children_rss_mb"] > 50 and rep["children_cpu_pct_mean"] > 0
    assert rep["total_rss_mb"] >= rep["server_rss_mb"]


@pytest.mark.parametrize("args, message", [
    (["--port", "70000", "--sessions", "3", "--seconds", "5", "--trainings", "0"], "--port must be"),
    (["--port", "-1", "--sessions", "3", "--seconds", "5", "--trainings", "0"], "--port must be"),
    (["--port", "8501", "--seconds", "5", "--trainings", "0"], "--sessions"),
    (["--port", "8501", "--sessions", "0", "--seconds", "5", "--trainings", "0"], "--sessions must be"),
    (["--port", "8501", "--sessions", "3", "--seconds", "-1", "--trainings", "0"], "--seconds must be"),
    (["--port", "8501", "--sessions", "3", "--seconds", "5", "--trainings", "4"], "--trainings must be"),
    (["--port", "8501", "--sessions", "3", "--seconds", "5", "--trainings", "0", "--think", "5,2"], "--think"),
    (["--port", "8501", "--sessions", "x", "--seconds", "5", "--trainings", "0"], "invalid int"),
    (["--port", "8501", "--sessions", "3", "--seconds", "5", "--trainings", "0", "--flood", "501"], "--flood must be"),
    (["--port", "8501", "--sessions", "3", "--seconds", "5", "--trainings", "0", "--flood", "9", "--flood-address",
      "127.0.0.1"], "--flood-address must be an IP address other than 127.0.0.1"),
    (["--port", "8501", "--sessions", "3", "--seconds", "5", "--trainings", "0", "--timeline", "/nonexistent/t.csv"],
     "--timeline: the folder of '/nonexistent/t.csv' does not exist"),
])
def test_bad_arguments_exit_2(args, message):
    r = _loadtest(*args, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and message in r.stderr, r.stderr
    assert r.stdout == ""


def test_no_server_on_the_port_exits_2():
    r = _loadtest("--port", str(free_port()), "--sessions", "1", "--seconds", "1", "--trainings", "0", timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error: no Streamlit server answers")


def test_wire_relay_times_the_requests_that_pass_through_it(server):
    """A tab through the relay draws the same page as a tab straight to the server, and the relay records one
    rerun sent and its run finished per request, a fragment's (Next on Inside the model) included
    (permessage-deflate frames decoded)."""
    import asyncio
    import concurrent.futures

    from loadgen.protocol import StreamlitTab
    from loadgen.wire import WireRelay

    async def visit(port):
        tab = StreamlitTab(port, timeout=60)
        try:
            results = [await tab.open(""), await tab.goto("data_tokens"), await tab.goto("forward"),
                       await tab.interact(click="Next ▶")]  # a fragment run
            return results, len(tab.elements), sorted(tab.pages)
        finally:
            await tab.close()

    def run(port):  # in a thread of its own: the browser tests may leave an event loop running in this one
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, visit(port)).result(timeout=120)

    direct, n_direct, pages_direct = run(server.port)
    with WireRelay(server.port) as relay:
        assert relay.port not in (0, server.port)
        relayed, n_relayed, pages_relayed = run(relay.port)
        events = list(relay.events)
    assert all(r.ok and not r.exceptions for r in direct + relayed), [r.error for r in direct + relayed]
    assert (n_relayed, pages_relayed) == (n_direct, pages_direct) and n_direct > 5
    assert [k for k, _ in events].count("sent") == 4
    assert [k for k, _ in events].count("finished") == 4
    sent = [t for k, t in events if k == "sent"]
    done = [t for k, t in events if k == "finished"]
    for i, r in enumerate(relayed):
        assert sent[i] < done[i] < (sent[i + 1] if i + 1 < 4 else float("inf"))
        wire = relay.request_seconds(sent[i], done[i])
        # the relay sees the request leave after the tab sent it and the finish before the tab gets it
        assert 0 < wire <= r.seconds + 1e-3, (wire, r.seconds)
    assert relay.request_seconds(done[-1] + 1, done[-1] + 2) is None


@pytest.mark.browser
def test_browser_check_times_chromium_on_the_wire(server):
    """One round of the chromium validation: every step is timed by the generator, on the wire (through the
    relay), by devtools and drawn. The wire time lies inside the drawn time: the relay sees the request after
    the click and the finish before chromium draws it."""
    # chromium, eight steps and the generator's own tab: 257 s with the suite on one shared core (docs/TESTING.md)
    r = subprocess.run([sys.executable, "-m", "loadgen.browser_check", "--port", str(server.port), "--rounds", "1",
                        "--json"], cwd=REPO, capture_output=True, text=True, timeout=3 * LOAD / 1000)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    res = json.loads(r.stdout)
    assert res["pinned"] is (len(os.sched_getaffinity(0)) >= 2) and list(res["steps"]) == step_labels()
    for label, s in res["steps"].items():
        assert 0 < s["generator"] and 0 < s["browser_protocol"], (label, s)
        assert 0 < s["browser_wire"] <= s["browser_drawn"] + 0.01, (label, s)
    assert os.sched_getaffinity(server.proc.pid) == os.sched_getaffinity(0)  # the server's CPUs are given back


def test_without_a_port_it_starts_its_own_server_takes_the_solo_yardstick_and_stops_it():
    """One scenario, two claims. Without ``--port`` the generator starts its own server and stops it at the end.
    The trainings' ratio is judged against the mean of a solo training before the load and one after it, once
    the load's own training has ended (the machine's speed drifts between the two)."""
    # The generator waits for events (each solo training's first step, the load's trainings' end), each at most
    # 3 x --timeout: the tests' UPDATE budget, scaled to the machine (BERTCORE_TEST_SLOWDOWN), as is the load's
    # length, in which the load's training must start and show its speed; its own server's start is inside
    r = _loadtest("--sessions", "1", "--seconds", f"{20 * SLOWDOWN:g}", "--trainings", "1", "--think", "0.5,1",
                  "--solo-seconds", "12", "--no-warmup", "--json", "--timeout", f"{UPDATE / 1000:g}",
                  timeout=8 * UPDATE / 1000 + LOAD / 1000)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    rep = json.loads(r.stdout)
    assert rep["server_started_by_the_test"] is True
    assert rep["errors"] == 0 and rep["exceptions"] == 0 and rep["isolation_ok"] is True, rep["error_samples"]
    before, after = rep["training"]["solo_runs"]
    assert before > 0 and after > 0
    assert rep["training"]["solo_steps_per_s"] == pytest.approx((before + after) / 2, abs=0.01)
    speed = rep["training"]["steps_per_s"][0]
    assert speed is not None, f"the load's training showed no speed in its {20 * SLOWDOWN:g} s: {rep['training']}"
    assert rep["training_speed_vs_solo"] == pytest.approx(speed / ((before + after) / 2), abs=0.01)
    pid = rep["server_pids"][0]  # the server it started is gone
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    assert rep["generator_cpu_pct_mean"] > 0


def test_the_untimed_sessions_words_are_whole_marker_words():
    """The scan finds zqx + 9 letters; a longer word would be read as another session's (a false leak)."""
    from loadgen.student import MARKER_RE, SOLO_MARKER, VISIT, WARMUP_MARKER, Type

    for word in (WARMUP_MARKER, SOLO_MARKER):
        assert MARKER_RE.fullmatch(word.encode()) and MARKER_RE.findall(word.encode()) == [word.encode()]
    typed = [a for p in VISIT for a in p.actions if isinstance(a, Type)]
    assert typed and all("{marker}" in a.text for a in typed)


# ----------------------------------------------------------------------------- one client cannot starve the class
CAPPED = {"BERTCORE_CLIENT_SESSIONS_PER_MINUTE": "4", "BERTCORE_CLIENT_RUNS_PER_MINUTE": "40",
          "BERTCORE_CLIENT_STARTS_PER_MINUTE": "1", "BERTCORE_CLIENT_REFUSED_DELAY": "1",
          # the minute's caps alone: with the pace (tests/test_client_limits.py) the four sessions' runs come one per
          # 1.5 s, and whether one of them gets a Start in within the 45 s depends on the machine's speed
          "BERTCORE_CLIENT_BURST": "0"}


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory):
    """A server with small caps per client address (explorer/session/client_limits.py), so a short flood reaches them."""
    d = tmp_path_factory.mktemp("flood")
    srv = AppServer(d / "server.log", runs_dir=d / "runs", env=CAPPED).start()
    yield srv
    srv.stop()


def test_a_flood_from_one_address_is_held_to_its_caps_beside_the_class(capped_server, tmp_path):
    """8 flood sessions from 127.0.0.2, each with a forged X-Forwarded-For, beside 2 students from 127.0.0.1 (the
    server machine itself: not capped). The forged header is not believed (127.0.0.2 is no trusted proxy): the 8 are
    one client, so 4 sessions are let in and 4 refused, and 1 training starts in the minute. The students see no
    error and only their own texts."""
    r = _loadtest("--port", str(capped_server.port), "--sessions", "2", "--seconds", "45", "--trainings", "0",
                  "--rounds", "1", "--think", "0.1,0.3", "--ramp", "1", "--solo-seconds", "0", "--no-warmup",
                  "--flood", "8", "--flood-forge", "--json", "--timeline", str(tmp_path / "t.csv"), timeout=240)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{capped_server.log_tail()}"
    rep = json.loads(r.stdout)
    assert rep["errors"] == 0 and rep["exceptions"] == 0, rep["error_samples"] + rep["exception_samples"]
    assert rep["isolation_ok"] is True and rep["own_text_checks"] == 4, rep["leak_samples"]
    assert rep["pages"]["Overview"]["n"] == 2 and rep["pages"]["Embeddings"]["n"] == 2  # the students' round, whole
    fl = rep["flood"]
    assert (fl["address"], fl["via"], fl["forged_forwarded_for"]) == ("127.0.0.2", "source address", True)
    assert fl["sessions_opened"] == 8 and fl["sessions_admitted"] == 4, fl
    assert fl["trainings_started"] == 1 and fl["starts_pressed"] > fl["trainings_started"], fl
    assert fl["refused"] >= 4 + fl["starts_refused"] and fl["errors"] == 0, fl
    assert fl["process_cpu_s"] > 0 and fl["nice"] == os.nice(0), fl  # it ran in a process of its own (loadgen.flood)
    lag = rep["generator_loop_lag_s"]
    assert 0 <= lag["p95"] <= lag["max"], lag
    # the timeline: every timed request of the students and every request of the flood, by when it started
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert rows[0] == "start_s,seconds,who,what"
    students = [r for r in rows[1:] if r.split(",")[2].startswith("s")]
    flood = [r for r in rows[1:] if r.split(",")[2].startswith("flood")]
    assert len(students) == sum(p["n"] for p in rep["pages"].values()) and len(flood) == fl["requests"]
    starts = [float(r.split(",")[0]) for r in rows[1:]]
    assert starts == sorted(starts) and 0 <= starts[0] and starts[-1] <= 45 + 60
    w = rep["windows"]
    assert sum(x["n"] for x in w) == len(students) and sum(x["flood"] for x in w) == len(flood)
    assert [x["t"] for x in w] == sorted(x["t"] for x in w) and all(x["t"] % 10 == 0 for x in w)


def test_windows_put_each_request_in_the_ten_seconds_it_started_in():
    from loadgen.report import windows

    students = [(100.0 + t, secs, "s00", "Overview") for t, secs in ((0.5, 0.1), (3.0, 2.0), (9.9, 0.2), (25.0, 1.6))]
    flood = [(100.0 + t, 0.05, "flood000", "open /") for t in (4.0, 5.0, 31.0)]
    assert windows(students, flood, t0=100.0) == [
        {"t": 0.0, "n": 3, "p95": 1.82, "slow": 1, "flood": 2},  # 0.1, 2.0, 0.2: p95 between 0.2 and 2.0
        {"t": 20.0, "n": 1, "p95": 1.6, "slow": 1, "flood": 0},
        {"t": 30.0, "n": 0, "p95": None, "slow": 0, "flood": 1},
    ]
    assert windows([(99.0, 0.3, "s01", "x")], [], t0=100.0)[0]["t"] == 0.0  # a request just before: the first window


def test_the_flood_process_reports_what_went_wrong_in_it():
    """The flood's own process (``python -m loadgen.flood``) against a port nobody listens on: its outcome comes back
    through the JSON line, each session's failed connection an error of its own, and with the niceness it was given."""
    import asyncio
    import concurrent.futures
    import time

    from loadgen.flood import FloodSettings, run_flood_process

    s = FloodSettings(sessions=3, ramp=0.0, nice=5)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a browser test may have set a loop in this thread
        out = pool.submit(asyncio.run, run_flood_process(free_port(), s, time.monotonic() + 5, 5.0)).result(60)
    assert out.sessions_opened == 3 and out.requests == 3 and out.sessions_admitted == 0, out
    assert len(out.errors) == 3 and all("open /: connect failed" in e for e in out.errors), out.errors
    assert out.cpu_seconds > 0 and out.niceness == min(19, os.nice(0) + 5)


def test_behind_a_proxy_on_loopback_the_forwarded_address_is_the_client(capped_server):
    """From 127.0.0.1 (a trusted proxy, as nginx on the same machine) X-Forwarded-For names the client: the fifth
    session of 203.0.113.7 gets the caps' message instead of the page, while 203.0.113.8 and the machine itself
    (no header) are let in."""
    import asyncio
    import concurrent.futures

    from loadgen.flood import REFUSED
    from loadgen.protocol import StreamlitTab

    async def one(headers):
        tab = StreamlitTab(capped_server.port, timeout=120, headers=headers)
        try:
            r = await tab.open("")
            return r.ok, REFUSED in tab.shown_bytes(), "train" in tab.pages
        finally:
            await tab.close()

    async def visit():
        same = [await one({"X-Forwarded-For": "203.0.113.7"}) for _ in range(5)]
        return same, await one({"X-Forwarded-For": "203.0.113.8"}), await one({})

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # an event loop of its own (see the relay test)
        same, other, local = pool.submit(asyncio.run, visit()).result(timeout=300)
    assert same == [(True, False, True)] * 4 + [(True, True, False)]
    assert other == (True, False, True) and local == (True, False, True)


def test_behind_the_client_gate_a_turned_away_flood_session_asks_again_and_is_no_error(tmp_path):
    """serve.py with a small gate (page loads and websockets: 6 a minute, 2 at once, refusals told after 1 s): six
    flood sessions from 127.0.0.2 beside one student. The gate turns page loads away with HTTP 429; each such session
    opens the app again (as a reloading script would) instead of giving up, and the report counts those as the
    gate's refusals, not as errors. Fewer than six sessions get in within 25 s; the student sees no error."""
    gate = {"BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE": "6", "BERTCORE_CLIENT_CONNECTS_PER_MINUTE": "6",
            "BERTCORE_CLIENT_CONNECT_BURST": "2", "BERTCORE_CLIENT_REFUSED_DELAY": "1"}
    srv = AppServer(tmp_path / "server.log", runs_dir=tmp_path / "runs", env=gate, script="serve.py").start()
    try:
        r = _loadtest("--port", str(srv.port), "--sessions", "1", "--seconds", "25", "--trainings", "0",
                      "--rounds", "1", "--think", "0.1,0.3", "--ramp", "1", "--solo-seconds", "0", "--no-warmup",
                      "--flood", "6", "--json", "--timeline", str(tmp_path / "t.csv"), timeout=240)
    finally:
        srv.stop()
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    rep = json.loads(r.stdout)
    assert rep["errors"] == 0 and rep["exceptions"] == 0, rep["error_samples"] + rep["exception_samples"]
    fl = rep["flood"]
    assert fl["sessions_opened"] == 6 and 2 <= fl["sessions_admitted"] < 6, fl
    assert fl["gate_refused"] >= 4 and fl["errors"] == 0, fl  # each of the others asked again at least once
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert len([row for row in rows if row.endswith('"open / (refused)"')]) == fl["gate_refused"]
    assert len([row for row in rows if row.endswith('"open / (held)"')]) == fl["gate_held"]
