"""Numbers for the load test: percentiles, the server process's memory and CPU (read from /proc), the
JSON report and its readable table."""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

_PROC = Path("/proc")


# ----------------------------------------------------------------------------- statistics
def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the closest ranks (as numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def page_stats(times: dict[str, list[float]]) -> dict[str, dict]:
    """label -> {p50, p95, max, n} in seconds, rounded to milliseconds."""
    out = {}
    for label, xs in times.items():
        out[label] = {"p50": round(percentile(xs, 50), 3), "p95": round(percentile(xs, 95), 3),
                      "max": round(max(xs), 3), "n": len(xs)}
    return out


def windows(students: list[tuple[float, float, str, str]], flood: list[tuple[float, float, str, str]],
            t0: float, width: float = 10.0, slow: float = 1.5) -> list[dict]:
    """The load phase in windows of ``width`` seconds from ``t0``, by when each request started: the students'
    requests (n, p95, how many took over ``slow`` s) and the flood's (n). A slow minute shows where it was:
    beside the flood's requests, or in the class alone. Rows are (start, seconds, who, what), monotonic time."""
    rows: dict[int, dict] = {}
    for kind, events in (("students", students), ("flood", flood)):
        for start, seconds, _, _ in events:
            w = rows.setdefault(int(max(0.0, start - t0) // width), {"students": [], "flood": 0})
            if kind == "students":
                w["students"].append(seconds)
            else:
                w["flood"] += 1
    out = []
    for i in sorted(rows):
        xs = rows[i]["students"]
        p95 = percentile(xs, 95)
        out.append({"t": round(i * width, 1), "n": len(xs), "p95": round(p95, 3) if p95 is not None else None,
                    "slow": sum(x > slow for x in xs), "flood": rows[i]["flood"]})
    return out


def write_timeline(path: str | Path, events: list[tuple[float, float, str, str]], t0: float) -> None:
    """Every request of the load phase as CSV: its start (seconds after the load began), seconds, who, what."""
    lines = ["start_s,seconds,who,what"]
    for start, seconds, who, what in sorted(events):
        lines.append(f"{start - t0:.3f},{seconds:.3f},{who},\"{what.replace(chr(34), chr(39))}\"")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- the server process
def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def find_server_pid(port: int) -> int | None:
    """The pid of the process listening on ``port`` (through /proc; needs the same user or root), or None."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for d in _PROC.iterdir():
        if not d.name.isdigit():
            continue
        try:
            for fd in (d / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return int(d.name)
        except OSError:
            continue
    return None


def proc_sample(pid: int) -> tuple[float, float] | None:
    """(RSS in MB, CPU seconds used so far) of a process, or None when it is gone."""
    try:
        status = (_PROC / str(pid) / "status").read_text()
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    rss_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return rss_kb / 1024.0, cpu


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its trainings, bertcore.launch.worker), from /proc/PID/task/TID/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = list((_PROC / str(p) / "task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(x) for x in (t / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


class ServerMonitor:
    """Samples the server processes' RSS and CPU (summed) once a second while a phase runs, and apart from them
    the processes they started (trainings in their own processes): ``child_rss`` and ``child_cpu_pct``."""

    def __init__(self, pids: list[int], interval: float = 1.0):
        self.pids = [p for p in pids if p]
        self.interval = interval
        self.rss: list[float] = []
        self.cpu_pct: list[float] = []
        self.child_rss: list[float] = []
        self.child_cpu_pct: list[float] = []
        self._stop = asyncio.Event()

    def sample_children(self) -> dict[int, tuple[float, float]]:
        """{pid: (RSS MB, CPU seconds)} of the servers' descendants alive now."""
        out = {}
        for p in {k for pid in self.pids for k in descendants(pid)}:
            x = proc_sample(p)
            if x is not None:
                out[p] = x
        return out

    def sample(self) -> tuple[float, float] | None:
        """(RSS MB, CPU seconds) summed over the processes; None when one of them is gone."""
        parts = [proc_sample(p) for p in self.pids]
        if not parts or any(x is None for x in parts):
            return None
        return sum(x[0] for x in parts), sum(x[1] for x in parts)

    def now(self) -> float | None:
        s = self.sample()
        return s[0] if s else None

    async def run(self, max_seconds: float) -> None:
        """Sample until ``stop()`` or ``max_seconds``."""
        end = time.monotonic() + max_seconds
        prev, t_prev, kids = self.sample(), time.monotonic(), self.sample_children()
        while prev is not None and time.monotonic() < end and not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            cur, t, now = self.sample(), time.monotonic(), self.sample_children()
            if cur is None:
                return
            self.rss.append(cur[0])
            self.child_rss.append(sum(x[0] for x in now.values()))
            if t > t_prev:
                self.cpu_pct.append(100.0 * (cur[1] - prev[1]) / (t - t_prev))
                # CPU of the children alive at both samples (one that started or ended in between is left out)
                self.child_cpu_pct.append(100.0 * sum(now[p][1] - kids[p][1] for p in now if p in kids) / (t - t_prev))
            prev, t_prev, kids = cur, t, now

    def stop(self) -> None:
        self._stop.set()


# ----------------------------------------------------------------------------- the report
def format_table(rep: dict) -> str:
    """The report as a few readable lines and a per-page table (what --json prints, for people)."""
    lines = [f"load test: {rep['sessions']} sessions for {rep['seconds']:.0f} s, {rep['trainings']} training(s), "
             f"think {rep['think'][0]:g}-{rep['think'][1]:g} s; server pid(s) {rep.get('server_pids')}",
             f"load average before/after: {rep['load_average']['before']} / {rep['load_average']['after']}", "",
             f"{'page':<26}{'n':>6}{'p50 s':>9}{'p95 s':>9}{'max s':>9}"]
    for name, s in rep["pages"].items():
        lines.append(f"{name:<26}{s['n']:>6}{s['p50']:>9.3f}{s['p95']:>9.3f}{s['max']:>9.3f}")
    tr = rep.get("training", {})
    speeds = ", ".join(f"{x:.1f}" for x in tr.get("steps_per_s", []) if x is not None) or "-"
    lines += ["",
              f"requests {rep['requests']}, errors {rep['errors']}, exceptions {rep['exceptions']}, "
              f"'server busy' answers {rep['busy']}",
              f"server RSS {rep['server_rss_mb_start']} MB at the start, max {rep['server_rss_mb']} MB; server CPU "
              f"mean {rep['server_cpu_pct_mean']}%, max {rep['server_cpu_pct_max']}% (200% = both cores); "
              f"load generator {rep.get('generator_cpu_pct_mean')}%, its event loop late by "
              f"{_lag(rep.get('generator_loop_lag_s'))}",
              f"the server's child processes (trainings): RSS max {rep.get('children_rss_mb')} MB, CPU mean "
              f"{rep.get('children_cpu_pct_mean')}%; server and children together: RSS max {rep.get('total_rss_mb')} MB",
              f"training steps/s: solo {tr.get('solo_steps_per_s')} (the mean of {_solos(tr)}), under load {speeds}; "
              f"vs solo {rep['training_speed_vs_solo']}",
              f"isolation: {'ok' if rep['isolation_ok'] else 'FAILED'} ({rep['own_text_checks']} own-text checks)"]
    fl = rep.get("flood")
    if fl:  # the attacker beside the class (loadgen.flood); the lines above are the students' own
        lines += [f"flood: {fl['sessions']} sessions from {fl['address']} ({fl['via']}"
                  f"{', each with a forged X-Forwarded-For' if fl['forged_forwarded_for'] else ''}): "
                  f"{fl['sessions_admitted']} of {fl['sessions_opened']} opened were let in; {fl['requests']} requests "
                  f"({fl['requests_per_s']}/s), {fl['refused']} answered with the caps' message, "
                  f"{fl.get('gate_refused', 0)} turned away by the client gate and {fl.get('gate_held', 0)} held "
                  f"by it past the timeout, p50 {fl['p50']} s, "
                  f"p95 {fl['p95']} s; Start pressed {fl['starts_pressed']} times: {fl['starts_refused']} refused by "
                  f"the client's cap, {fl['starts_busy']} 'server busy', {fl['starts_already_running']} 'already running', "
                  f"{fl['trainings_started']} trainings started; "
                  f"errors {fl['errors']}; its own process used {fl.get('process_cpu_s')} s of CPU "
                  f"(nice {fl.get('nice', 0)})"]
    slow = [w for w in rep.get("windows", []) if w["slow"]]
    if slow:  # where the slow pages were: beside the flood's requests, or in the class alone
        lines.append("windows with pages over 1.5 s (start s: p95 s, slow/n, flood requests): " + "; ".join(
            f"{w['t']:g}: {w['p95']}, {w['slow']}/{w['n']}, {w['flood']}" for w in slow))
    targets = rep.get("targets", {})
    if targets:
        lines.append("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    for title, key in (("errors", "error_samples"), ("exceptions", "exception_samples"),
                       ("isolation failures", "leak_samples")):
        if rep.get(key):
            lines += ["", f"first {title}:"] + [f"  {s}" for s in rep[key]]
    return "\n".join(lines)


def _lag(lag: dict | None) -> str:
    return f"p95 {lag['p95']} s, max {lag['max']} s" if lag else "-"


def _solos(tr: dict) -> str:
    runs = tr.get("solo_runs") or []
    return " before and ".join(f"{x:g}" for x in runs) + (" after the load" if len(runs) == 2 else " before the load")
