"""The Lab page in AppTest (issue 55): a study started on the page trains in the background (its StudyRun) and its
table shows study.json's numbers, in a new session of the workspace too and after a server restart (only the disk
left); a study stopped part-way starts again and trains only what is missing; a study is one entry of the sidebar's
run list, its runs are not in the model switcher; a read-only link shows a study with its runs and nothing to start,
and a forged id or run name opens nothing."""
from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bertcore.errors import InputError
from bertcore.io.checkpoint import atomic_write
from bertcore.launch import study as S
from bertcore.lab import table as T
from bertcore.lab.studies import METRICS, custom_study, slug
from bertcore.training import runs
from bertcore.training.history import History
from conftest import TRAINING_RUNS
from explorer.launch import training_run
from explorer.session import share_links, workspace
from explorer.launch import studies
from tiny_runs import model_folder, workspace_run

APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGE = "app_pages/lab.py"
STUDY_END = 900  # s: a tiny study (two runs of 20-30 steps, each scored) on a busy 2-core machine
OWNER = "owner-workspace-0001xyz"


def _app(page: str | None = PAGE, state: dict | None = None, **query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in query.items():
        at.query_params[k] = v
    for k, v in (state or {}).items():
        at.session_state[k] = v
    at.run()
    if page is not None:
        at.switch_page(page).run()
    _ok(at)
    return at


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not [e for e in at.error if "unexpected" in str(e.value).lower()], [e.value for e in at.error]


def _param(at, name):
    v = at.query_params.get(name)
    return v[0] if isinstance(v, list) else v


def _active(at) -> str:
    return next(m.value for m in at.sidebar.markdown if m.value.startswith("**Active model:**"))


def _frame(at, column: str):
    """The main area's dataframe that has ``column``."""
    found = [d.value for d in list(at.main.table) + list(at.main.dataframe) if column in d.value.columns]
    assert found, [list(d.value.columns) for d in list(at.main.table) + list(at.main.dataframe)]
    return found[0]


def _wait(run, cond=lambda s: not s.running, timeout: float = STUDY_END):
    """Poll the StudyRun (its heartbeat, as the page's fragment does) until ``cond(snapshot)``."""
    deadline = time.monotonic() + timeout
    while True:
        s = run.snapshot()
        if cond(s):
            return s
        assert time.monotonic() < deadline, f"the study did not get there in {timeout} s: {s.status} {s.states}"
        time.sleep(0.5)


def _start_custom(at, values: str, seeds: int, steps: int) -> None:
    at.selectbox(key="lab_study_name").select("custom").run()
    at.text_input(key="lab_vary_values").input(values).run()
    at.slider(key="lab_seeds").set_value(seeds).run()
    at.number_input(key="lab_steps").set_value(steps).run()
    _ok(at)
    at.button(key="lab_start").click().run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]


def _check_table(at, data: dict) -> None:
    """Every cell of the page's table is ``table.cell`` of study.json's numbers; the runs table holds each run's
    metrics as study.json has them."""
    table = _frame(at, "MLM acc")
    cols = T.used_metrics(data["variants"])
    assert list(table.columns[2:2 + len(cols)]) == [METRICS[k][0] for k in cols]
    for v in data["variants"]:
        name = v["name"] + (" (reference)" if v["name"] == data["reference"] else "")
        row = table[table["variant"] == name]
        assert len(row) == 1, (name, table["variant"].tolist())
        for k in cols:
            assert row.iloc[0][METRICS[k][0]] == T.cell(v, k), (name, k)
    listed = _frame(at, "seed")
    for v in data["variants"]:
        for r in v["runs"]:
            row = listed[(listed["variant"] == v["name"]) & (listed["seed"] == r["seed"])]
            assert len(row) == 1
            for k in cols:
                want = (r.get("metrics") or {}).get(k)
                got = row.iloc[0][METRICS[k][0]]
                assert (want is None and (got is None or math.isnan(got))) or got == pytest.approx(want), (k, got, want)


def _curves(at) -> dict:
    """(column, variant) -> (steps, values) of the Lab's curves figure."""
    charts = [json.loads(e.proto.spec) for e in at.get("plotly_chart") if '"column"' in e.proto.spec]
    assert len(charts) == 1
    return {(t["meta"]["column"], t["meta"]["variant"]): (t["x"], t["y"]) for t in charts[0]["data"]}


def test_a_study_started_on_the_page_fills_its_table_and_is_found_again(monkeypatch):
    ws = runs.new_workspace_id()
    at = _app(ws=ws)
    _start_custom(at, "0.15, 0.3", seeds=1, steps=20)
    run = training_run.find_live(ws, studies.LAB_SLOT)
    assert run is not None
    TRAINING_RUNS.append(run)
    folder = Path(run.out_dir)
    assert folder.parent == runs.workspace_dir(ws) and _param(at, "study") == folder.name
    at.run()  # while it runs: the progress, and a row per variant with nothing scored yet
    _ok(at)
    bar = [e.proto.text for e in at.main.get("progress")]
    assert bar and "of 2 runs scored" in bar[0], bar
    assert at.button(key="lab_stop") and at.button(key="lab_start").disabled
    at.checkbox(key=f"lab_sure_{folder.name}").check().run()
    assert at.button(key="lab_delete").disabled  # not while it runs (the sidebar offers no Delete either)
    assert "sb_run_delete" not in {b.key for b in at.sidebar.button}
    with pytest.raises(InputError, match="still training"):
        runs.delete_run(folder, root=runs.workspace_dir(ws))
    at.switch_page("app_pages/attention.py").run()  # another page: the sidebar shows the study (its heartbeat)
    _ok(at)
    assert "of 2 runs done" in [e.proto.text for e in at.sidebar.get("progress") if "study:" in e.proto.text][0]
    s = _wait(run)
    assert s.status == "finished", (s.status, s.message)
    data = S.read_study(folder)
    assert data["status"] == "finished" and data["done"] == data["total"] == 2
    assert all(r["metrics"]["mlm_acc"] > 0 for v in data["variants"] for r in v["runs"])

    again = _app(ws=ws, study=folder.name)  # F5: a new session of the workspace, the study in the URL
    _check_table(again, data)
    training_run.register_live(ws, studies.LAB_SLOT, None)  # a server restart: only the disk is left
    cold = _app(ws=ws, study=folder.name)
    _check_table(cold, data)
    assert _param(cold, "study") == folder.name
    curves = _curves(cold)
    for column in ("eval_mlm_acc", "eval_nsp_acc"):
        for variant, pts in T.mean_curves(data, column).items():
            assert curves[(column, variant)] == ([s for s, _ in pts], pytest.approx([y for _, y in pts]))
    assert not [b for b in cold.button if b.key == "lab_restart"]  # a finished study has nothing to start again

    # open one run on the other pages: it becomes the active model, then the Attention page draws it
    name = f"{slug('mlm_probability=0.3')}-seed0"
    cold.selectbox(key="lab_run").select(name).run()
    cold.button(key="lab_open").click().run()
    _ok(cold)
    assert _active(cold) == "**Active model:** custom · mlm_probability=0.3 · seed 0"
    cold.switch_page("app_pages/attention.py").run()
    _ok(cold)
    assert _active(cold) == "**Active model:** custom · mlm_probability=0.3 · seed 0"


@pytest.mark.long  # three trainings, each in its own process, scored
def test_a_study_stopped_part_way_starts_again_and_trains_only_what_is_missing(monkeypatch):
    monkeypatch.setenv("BERTCORE_MAX_TRAININGS", "1")  # one lane: the runs one after the other
    ws = runs.new_workspace_id()
    at = _app(ws=ws)
    _start_custom(at, "0.15, 0.3", seeds=1, steps=80)
    run = training_run.find_live(ws, studies.LAB_SLOT)
    TRAINING_RUNS.append(run)
    folder = Path(run.out_dir)
    first, second = "mlm_probability=0.15", "mlm_probability=0.3"
    _wait(run, lambda s: s.states.get((first, 0)) == "scored" or not s.running)
    at.button(key="lab_stop").click().run()  # the page drawn while it ran has the Stop button
    _ok(at)
    s = _wait(run)
    assert s.status == "stopped", (s.status, s.message)
    cells = {c.variant: c for c in S.open_study(folder).cells}
    assert cells[first].state == "scored" and cells[second].state != "scored", {k: c.state for k, c in cells.items()}
    done = cells[first].dir
    stamps = {p.name: p.stat().st_mtime_ns for p in done.iterdir() if p.is_file()}
    assert {"evaluation.json", "model.safetensors", "history.csv"} <= set(stamps)

    training_run.register_live(ws, studies.LAB_SLOT, None)  # a restart: the partial table comes from the disk
    again = _app(ws=ws, study=folder.name)
    data = S.read_study(folder)
    assert data["status"] == "stopped" and data["done"] == 1
    _check_table(again, data)
    row = _frame(again, "MLM acc").set_index("variant").loc[second]
    assert row["MLM acc"] == "n/a" and row["seeds scored"] == "0/1"
    assert [c.variant for c in S.open_study(folder).todo] == [second]  # what Start again will do
    again.button(key="lab_restart").click().run()
    _ok(again)
    assert not again.error, [e.value for e in again.error]
    run2 = training_run.find_live(ws, studies.LAB_SLOT)
    assert run2 is not None and run2 is not run
    TRAINING_RUNS.append(run2)
    s2 = _wait(run2)
    assert s2.status == "finished", (s2.status, s2.message)
    data = S.read_study(folder)
    assert data["status"] == "finished" and data["done"] == 2
    assert sorted(p.name for p in (folder / S.RUNS_DIR).iterdir()) == sorted([done.name, cells[second].dir.name])
    assert {p.name: p.stat().st_mtime_ns for p in done.iterdir() if p.is_file()} == stamps  # left as it was
    final = _app(ws=ws, study=folder.name)
    _check_table(final, data)


def test_a_custom_study_on_the_uploaded_corpus_keeps_it_in_its_folder():
    """The session's uploaded corpus (Data & tokens) reaches the runs as a file of the study folder: the corpus spec
    in study.json, loaded by every run and by Start again."""
    from bertcore.data.corpora import get_corpus
    from bertcore.data.corpus import load_corpus_file

    ws = runs.new_workspace_id()
    lines = "".join(f"the cat number {i} sat on the mat .\tthe dog number {i} ran in the park .\n" for i in range(40))
    at = _app(page="app_pages/data_tokens.py", ws=ws)
    at.radio(key="dt_source").set_value("upload a .txt file").run()
    at.file_uploader(key="dt_upload").set_value(("pets.txt", lines.encode(), "text/plain")).run()
    _ok(at)
    at.switch_page(PAGE).run()
    at.selectbox(key="lab_study_name").select("custom").run()
    at.radio(key="lab_vary_corpus").set_value("your uploaded corpus").run()
    assert "pets.txt: 40 sentence pairs" in " ".join(c.value for c in at.main.caption)
    _start_custom(at, "0.15, 0.3", seeds=1, steps=10)
    run = training_run.find_live(ws, studies.LAB_SLOT)
    TRAINING_RUNS.append(run)
    assert run.stop(wait=STUDY_END)  # only where the corpus went matters here (the CLI test trains on a file)
    folder = Path(run.out_dir)
    data = S.read_study(folder)
    assert data["corpus"] == str((folder / studies.CORPUS_FILE).resolve())
    assert get_corpus(data["corpus"]).pairs == load_corpus_file(lines.encode(), "pets.txt").pairs
    assert S.open_study(folder).corpus == data["corpus"]  # Start again loads the same file


# ----------------------------------------------------------------------------- a study made on disk (no training)
MLM = {("mlm_probability=0.15", 0): 0.40, ("mlm_probability=0.15", 1): 0.42, ("mlm_probability=0.15", 2): 0.41,
       ("mlm_probability=0.3", 0): 0.46, ("mlm_probability=0.3", 1): 0.47, ("mlm_probability=0.3", 2): 0.47}
NSP = {("mlm_probability=0.15", 0): 0.60, ("mlm_probability=0.15", 1): 0.70, ("mlm_probability=0.15", 2): 0.65,
       ("mlm_probability=0.3", 0): 0.66, ("mlm_probability=0.3", 1): 0.61, ("mlm_probability=0.3", 2): 0.68}


def study_on_disk(ws: str) -> Path:
    """A finished custom study of three seeds whose runs are tiny real checkpoints with chosen scores and curves: the
    runner's own plan and study.json (``S.plan`` reads them back as scored)."""
    study = custom_study("mlm_probability=0.15,0.3")
    folder = studies.new_folder(study.name, runs.workspace_dir(ws))
    for (variant, seed), mlm in MLM.items():
        d = folder / S.RUNS_DIR / f"{slug(variant)}-seed{seed}"
        model_folder(d, variant)
        runs.write_run_json(d, runs.run_meta(f"custom · {variant} · seed {seed}", status="finished", steps_done=20,
                                             total_steps=20))
        nsp, h = NSP[(variant, seed)], History.pretraining()
        for step in range(1, 21):  # every step's training row; held-out rows at steps 10 and 20
            row = {"step": step, "mlm_loss": 5.0, "nsp_loss": 0.7, "mlm_acc": 0.1, "nsp_acc": 0.5, "lr": 1e-3}
            if step % 10 == 0:
                row.update(eval_mlm_loss=4.0, eval_nsp_loss=0.6, eval_mlm_acc=mlm * step / 20,
                           eval_nsp_acc=nsp * step / 20)
            h.append(row)
        atomic_write(d / "history.csv", h.to_csv())
        atomic_write(d / "evaluation.json", json.dumps({"format": 1, "metrics": {
            "mlm_acc": mlm, "next_token_acc": None, "nsp_acc": nsp, "sop_acc": None}}))
    S.write_study(S.plan(study, folder, 3, 20), "finished")
    return folder


def test_a_study_on_disk_shows_mean_sd_the_test_and_the_curves():
    ws = runs.new_workspace_id()
    folder = study_on_disk(ws)
    at = _app(ws=ws, study=folder.name)
    table = _frame(at, "MLM acc")
    assert list(table.columns) == ["variant", "seeds scored", "MLM acc", "NSP acc"]  # n/a-only metrics left out
    ref = table.set_index("variant").loc["mlm_probability=0.15 (reference)"]
    other = table.set_index("variant").loc["mlm_probability=0.3"]
    for row, variant in ((ref, "mlm_probability=0.15"), (other, "mlm_probability=0.3")):
        xs = [MLM[(variant, s)] for s in range(3)]
        assert row["MLM acc"].startswith(f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}")
        ys = [NSP[(variant, s)] for s in range(3)]
        assert row["NSP acc"] == f"{statistics.mean(ys):.3f} ± {statistics.stdev(ys):.3f}"  # no mark: no difference
        assert row["seeds scored"] == "3/3"
    assert not ref["MLM acc"].endswith(("▲", "▼")) and other["MLM acc"].endswith("▲")  # +0.057 on every seed
    captions = " ".join(c.value for c in at.main.caption)
    assert T.TEST in captions and "mlm_probability=0.15" in captions
    curves = _curves(at)
    for column, scores in (("eval_mlm_acc", MLM), ("eval_nsp_acc", NSP)):
        for variant in ("mlm_probability=0.15", "mlm_probability=0.3"):
            last = statistics.mean(scores[(variant, s)] for s in range(3))
            assert curves[(column, variant)] == ([10, 20], pytest.approx([last / 2, last]))
    csv = T.to_csv(S.read_study(folder), custom_study("mlm_probability=0.15,0.3"))
    assert [d.proto.label for d in at.main.get("download_button")] == ["Download the table (CSV)"]
    assert csv.splitlines()[0].startswith("variant,seeds,mlm_acc_mean,mlm_acc_sd")

    at.checkbox(key=f"lab_sure_{folder.name}").check().run()
    at.button(key="lab_delete").click().run()  # a finished study goes, with its runs
    _ok(at)
    assert not folder.exists() and _param(at, "study") is None and not list(at.main.table)


def test_a_study_is_one_entry_of_the_run_list_and_its_runs_are_not_models():
    ws = runs.new_workspace_id()
    workspace_run(ws, "a plain run")
    folder = study_on_disk(ws)  # newest: the run list selects it
    at = _app(page=None, ws=ws)
    pick = at.sidebar.selectbox(key="sb_run")
    assert len(pick.options) == 2 and pick.value == folder.name  # the study is one entry, its runs none
    assert [o for o in pick.options if o.endswith("study, finished: 6/6 runs scored")], pick.options
    keys = {b.key for b in at.sidebar.button}
    assert not keys & {"sb_run_use", "sb_run_resume", "sb_run_zip"} and "sb_run_share" in keys
    links = [e.proto for e in at.sidebar.get("page_link") if e.proto.page == "lab"]
    assert [p.query_string for p in links] == [f"study={folder.name}"]
    switch = next(s for s in at.sidebar.selectbox if s.label == "Switch model")
    assert "a plain run" in switch.options and not [o for o in switch.options if "seed" in o]
    assert [r.id for r in studies_of(ws)] == [folder.name]


def studies_of(ws: str):
    return [r for r in runs.list_runs(runs.workspace_dir(ws)) if r.kind == "study"]


def test_a_shared_study_opens_read_only_in_the_lab_and_forged_ones_open_nothing():
    folder = study_on_disk(OWNER)
    owner = _app(page=None, ws=OWNER)
    owner.sidebar.button(key="sb_run_share").click().run()
    _ok(owner)
    code = [c.value for c in owner.sidebar.code]
    assert len(code) == 1 and code[0].startswith("lab?share="), code  # a study's link opens the Lab page
    sid = code[0].split("=", 1)[1]
    assert share_links.lookup(sid) == folder
    before = {q: q.read_bytes() for q in folder.rglob("*") if q.is_file()}

    viewer = _app(page=None, share=sid)
    first = f"{slug('mlm_probability=0.15')}-seed0"
    assert _active(viewer) == "**Active model:** shared, read-only: custom · mlm_probability=0.15 · seed 0"
    assert viewer.session_state[workspace.ACTIVE_KEY] == f"share:{sid}/{first}"
    viewer.switch_page(PAGE).run()
    _ok(viewer)
    keys = {b.key for b in viewer.button}
    assert "lab_open" in keys and not keys & {"lab_start", "lab_stop", "lab_restart", "lab_delete"}
    assert not [s for s in viewer.selectbox if s.key in ("lab_study_name", "lab_show")]
    _check_table(viewer, S.read_study(folder))
    shown = " ".join(str(e.value) for e in list(viewer.markdown) + list(viewer.caption) + list(viewer.code))
    assert OWNER not in shown and str(folder) not in shown
    other = f"{slug('mlm_probability=0.3')}-seed2"
    viewer.selectbox(key="lab_run").select(other).run()
    viewer.button(key="lab_open").click().run()
    _ok(viewer)
    assert _active(viewer) == "**Active model:** shared, read-only: custom · mlm_probability=0.3 · seed 2"
    assert _param(viewer, "share") == sid
    viewer.switch_page("app_pages/attention.py").run()
    _ok(viewer)
    assert _active(viewer) == "**Active model:** shared, read-only: custom · mlm_probability=0.3 · seed 2"
    viewer.switch_page("app_pages/train.py").run()
    assert viewer.button(key="train_start").disabled  # state.read_only(): nothing trains
    assert {q: q.read_bytes() for q in folder.rglob("*") if q.is_file()} == before  # the viewer wrote nothing there

    untrained = "**Active model:** fresh untrained (shared)"
    elsewhere = workspace_run(OWNER, "a plain run of the owner")
    for forged in (f"{sid}/../{elsewhere.name}", f"{sid}/{first}/..", f"{sid}/missing-seed0", f"{sid}/runs",
                   f"{sid}/{'x' * 200}", f"{sid[:-1]}{'B' if sid[-1] == 'A' else 'A'}/{first}", f"{sid}/", f"{sid}/{elsewhere.name}"):
        at = _app(page=None, state={workspace.ACTIVE_KEY: f"share:{forged}"})
        assert _active(at) == untrained, forged
    owner.sidebar.button(key="sb_run_revoke").click().run()
    _ok(owner)
    assert share_links.lookup(sid) is None
    for bad in (sid[:-1] + "!", folder.name, OWNER, sid):  # forged, another kind of id, a revoked link
        at = _app(page=None, share=bad)
        assert _active(at) == untrained and str(share_links.DEAD) in [w.value for w in at.sidebar.warning], bad
        at.switch_page(PAGE).run()
        _ok(at)
        assert not [d for d in at.main.table if "MLM acc" in d.value.columns], bad  # no study shown
        assert "lab_open" not in {b.key for b in at.button}


def test_a_shared_study_with_no_run_scored_yet_shows_the_study_and_no_model():
    folder = study_on_disk(OWNER)
    for d in (folder / S.RUNS_DIR).iterdir():
        (d / "evaluation.json").unlink()  # trained, not scored
    S.write_study(S.open_study(folder), "stopped", "stopped by the user")
    sid = share_links.create(OWNER, folder.name)
    viewer = _app(share=sid)
    assert viewer.session_state[workspace.ACTIVE_KEY] == f"share:{sid}"
    assert _active(viewer).startswith("**Active model:** shared study, read-only: Custom: mlm_probability")
    assert "sb_share_copy" not in {b.key for b in viewer.sidebar.button}  # no run open: nothing to copy
    row = _frame(viewer, "seeds scored").set_index("variant").loc["mlm_probability=0.3"]
    assert row["seeds scored"] == "0/3"
    assert not {b.key for b in viewer.button} & {"lab_open", "lab_restart", "lab_start"}
    warnings = " ".join(w.value for w in viewer.main.warning)
    assert "Stopped part-way: stopped by the user" in warnings
