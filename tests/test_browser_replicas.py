"""A class on several servers (docs/REPLICAS.md), in chromium: two app processes share one runs folder behind the
repository's nginx config (deploy/nginx-class.conf, sticky by cookie). A workspace link opened on the other
replica shows the same run, training there, and offers no second Resume; the replica that trains is killed
(SIGKILL) mid-training; the training's own process then stops it with a checkpoint; the killed replica's tab,
clicking at once, reconnects to the other replica in its own workspace, finds the run stopped there and resumes it; an upload goes through the proxy to the tab's new
replica. Nothing is lost: every step up to the checkpoint is kept and the resumed run continues from it."""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from browser_marks import BROWSER, LOAD, SERVER_ENV, TRAIN, UPDATE, apply_budgets, until, wait_idle

from bench.harness.nginx import NGINX, Nginx

pytestmark = [*BROWSER, pytest.mark.long, pytest.mark.skipif(NGINX is None, reason="needs nginx (scripts/install-test-tools.sh)")]

from playwright.sync_api import Page, expect  # noqa: E402

MAIN = '[data-testid="stMain"]'
SIDEBAR = '[data-testid="stSidebar"]'
CORPUS = "".join(f"the {a} sees the {b} .\tthen the {b} runs away .\n" for a in ("cat", "dog", "cow", "hen")
                 for b in ("fox", "owl", "bee", "ant"))


def ws_of(page: Page) -> str:
    return parse_qs(urlparse(page.url).query)["ws"][0]


def run_json(runs_dir: Path, ws: str) -> dict | None:
    found = sorted((runs_dir / "workspaces" / ws).glob("*/run.json"))
    try:
        return {**json.loads(found[0].read_text()), "dir": found[0].parent} if found else None
    except ValueError:
        return None  # read while it was replaced: read again


def wait_for(cond, timeout=TRAIN, what="condition"):
    """What the test waits for on disk (a run's checkpoint, an upload); ``timeout`` in ms."""
    value = until(cond, timeout)
    assert value, f"timed out waiting for {what}"
    return value


def parent_pid(pid: int) -> int:
    """The parent process of ``pid`` (/proc/PID/stat, field 4)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def history(run_dir: Path):
    import pandas as pd

    return pd.read_csv(run_dir / "history.csv")


def open_runs(page: Page) -> None:
    """Open the sidebar's "Runs in this workspace (1)" expander (once)."""
    sidebar = page.locator(SIDEBAR)
    expect(sidebar).to_contain_text("Runs in this workspace (1)", timeout=LOAD)
    if not sidebar.locator(".st-key-sb_run").is_visible():
        sidebar.get_by_text(re.compile(r"Runs in this workspace \(1\)")).click()


@pytest.mark.timeout(1800)  # two server starts, a training killed and resumed, on a shared 2-core machine
def test_two_replicas_share_runs_survive_a_killed_replica_and_pass_uploads(browser, tmp_path):
    from bench.harness import AppServer

    runs_dir = tmp_path / "runs"  # the shared storage every replica sees
    servers = [AppServer(tmp_path / f"replica{i}.log", runs_dir=runs_dir, env=SERVER_ENV, script="serve.py")  # as REPLICAS.md
               for i in (1, 2)]
    starters = [threading.Thread(target=s.start) for s in servers]
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    assert all(s.healthy_after for s in servers), [s.log_tail() for s in servers]
    proxy = Nginx([s.port for s in servers], tmp_path / "nginx").start()
    contexts = []
    try:
        # a sticky cookie for each replica (nginx hashes the cookie; find one that lands on each)
        sticky = {}
        for i in range(200):
            sticky.setdefault(proxy.upstream_for(f"student-{i}").rsplit(":", 1)[1], f"student-{i}")
            if len(sticky) == 2:
                break
        a, b = servers if str(servers[0].port) in sticky else servers[::-1]
        pages = []
        for server in (a, b):
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            apply_budgets(ctx)
            ctx.add_cookies([{"name": "bx_backend", "value": sticky[str(server.port)], "url": proxy.url}])
            contexts.append(ctx)
            pages.append(ctx.new_page())
        page, other = pages

        # replica A: start a long training (5000 steps, a checkpoint every 250) in a new workspace
        page.goto(f"{proxy.url}/train")
        expect(page.locator(".st-key-train_start button")).to_be_visible(timeout=LOAD)
        ws = ws_of(page)
        steps = page.locator(f'{MAIN} input[type="range"][aria-label="steps"]')
        steps.focus()
        steps.press("End")
        expect(steps).to_have_attribute("aria-valuetext", "5000")
        wait_idle(page)  # the click should not land on a page being redrawn
        page.locator(".st-key-train_start button").click()
        run = wait_for(lambda: (r := run_json(runs_dir, ws)) and r["status"] == "running" and r["steps_done"] >= 250
                       and r, what="replica A's first checkpoint after step 0")
        assert parent_pid(run["pid"]) == a.proc.pid  # it trains in a process of replica A's (its own interpreter)

        # replica B: the same workspace link shows the same run, training (on A), with no Resume and no Delete
        other.goto(f"{proxy.url}/?ws={ws}")
        open_runs(other)
        expect(other.locator(SIDEBAR)).to_contain_text(re.compile(r"running, step \d+/5000"), timeout=LOAD)
        assert other.locator(".st-key-sb_run_resume").count() == 0
        assert other.locator(".st-key-sb_run_delete").count() == 0
        assert ws_of(other) == ws

        # replica A dies mid-training (SIGKILL: no clean-up runs in it); its tab clicks a page at once and is
        # reconnected to B by the proxy. The training's process sees its server gone (end of its input) and stops as
        # the Stop button does: a resumable checkpoint at the step it had reached, not only at the last one of 250.
        at_kill = run_json(runs_dir, ws)["steps_done"]
        a.kill()
        # a click while the tab has no connection may be dropped by the frontend (it reruns the page it shows when it
        # reconnects), so the page switch that proves the reconnection is the one after the save, below
        page.locator('[data-testid="stSidebarNav"]').get_by_text("Overview").click()
        saved = wait_for(lambda: (r := run_json(runs_dir, ws)) and r["status"] == "stopped" and r, timeout=UPDATE,
                         what="the orphaned training's own stop")
        kept = history(saved["dir"])
        assert at_kill <= saved["steps_done"] < 5000 and "the server went away" in saved["reason"]
        assert list(kept.step) == list(range(1, saved["steps_done"] + 1))
        # the tab reconnects (to B) on its own; a page switch there works, as a student would retry a dropped click
        for attempt in range(3):
            wait_idle(page)
            page.locator('[data-testid="stSidebarNav"]').get_by_text("Overview").click()
            try:
                expect(page.locator(MAIN)).to_contain_text("How BERT pretrains", timeout=LOAD // 3)
                break
            except AssertionError:
                if attempt == 2:
                    raise
        open_runs(page)
        stopped = f"stopped at step {saved['steps_done']}/5000"
        expect(page.locator(SIDEBAR)).to_contain_text(stopped, timeout=LOAD)
        assert ws_of(page) == ws  # the same workspace, although its first run on B was a page switch
        assert page.locator('[data-testid="stException"]').count() == 0

        # resume on B: it continues from the last checkpoint
        page.locator(f"{SIDEBAR} .st-key-sb_run_resume button").first.click()
        wait_for(lambda: (r := run_json(runs_dir, ws)) and r["status"] == "running" and parent_pid(r["pid"]) == b.proc.pid
                 and r["steps_done"] >= saved["steps_done"] + 250, what="the resumed run's next checkpoint on B")
        other.reload()  # the other tab (on B too) sees it training again
        open_runs(other)
        expect(other.locator(SIDEBAR)).to_contain_text(re.compile(r"running, step \d+/5000"), timeout=LOAD)

        # an upload through the proxy reaches the tab's new replica (its session lives there)
        upload = tmp_path / "class-corpus.txt"
        upload.write_text(CORPUS, encoding="utf-8")
        page.locator('[data-testid="stSidebarNav"]').get_by_text("Data & tokens").click()
        expect(page.locator(".st-key-dt_source")).to_be_visible(timeout=LOAD)
        page.locator('.st-key-dt_source [role="radiogroup"] label').nth(2).click()
        page.locator(".st-key-dt_upload input[type=file]").set_input_files(str(upload))
        expect(page.locator(MAIN).get_by_text(re.compile(r"16 pairs from class-corpus\.txt")).first).to_be_visible(
            timeout=LOAD)
        assert page.locator(f'{MAIN} [data-testid="stAlertContentError"]').count() == 0
        stored = runs_dir / "workspaces" / ws / "uploads" / "corpus.txt"
        wait_for(lambda: stored.is_file() and stored.read_text(encoding="utf-8") == CORPUS, timeout=UPDATE,
                 what="the upload kept in the shared workspace")

        # stop it there: the run is resumable again, and every step up to now is in its history exactly once
        page.locator('[data-testid="stSidebarNav"] a[href*="/train"]').click()
        page.locator(".st-key-train_stop button").first.click()
        done = wait_for(lambda: (r := run_json(runs_dir, ws)) and r["status"] == "stopped" and r,
                        what="the resumed run stopped")
        assert done["steps_done"] > saved["steps_done"] and "stopped by the user" in done["reason"]
        final = history(done["dir"])
        assert list(final.step) == list(range(1, done["steps_done"] + 1))
        before = final[final.step <= saved["steps_done"]]  # the steps trained on A, as A saved them
        assert before[["mlm_loss", "nsp_loss", "lr"]].to_numpy().tolist() == \
            kept[["mlm_loss", "nsp_loss", "lr"]].to_numpy().tolist()
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        for ctx in contexts:
            ctx.close()
        proxy.stop()
        for s in servers:
            s.stop()
