"""Who may open what, in the app (AppTest): the sidebar's folder box under each folder policy (explorer.session.folder_access)
and read-only share links (explorer.session.share_links), tried as an attacker would. Each attempt's result is asserted: the
message, the active model, the files on disk."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from bertcore.training import runs
from explorer.session import folder_access, share_links
from explorer.session.state import READ_ONLY
from tiny_runs import model_folder, workspace_run

APP = str(Path(__file__).resolve().parents[1] / "app.py")
OWNER, VIEWER = "owner-workspace-0001xyz", "viewer-workspace-0002xy"
UNTRAINED = "**Active model:** fresh untrained (shared)"


def _page_files() -> list[str]:
    """The page files app.py's PAGES lists (read with ast: app.py is a script)."""
    tree = ast.parse(Path(APP).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PAGES")
    return [ast.literal_eval(row.elts[0]) for row in node.value.elts]


@pytest.fixture
def address():
    """Set Streamlit's server.address for one test (AppTest runs the script in this process)."""
    old = config.get_option("server.address")

    def set_to(value):
        config.set_option("server.address", value)
    yield set_to
    config.set_option("server.address", old)


def _app(timeout: float = 120, **query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _active(at) -> str:
    return next(m.value for m in at.sidebar.markdown if m.value.startswith("**Active model:**"))


def _open(at, path: str) -> str:
    """Type ``path`` into the folder box, press Open; the sidebar's message."""
    next(t for t in at.sidebar.text_input if t.key == "sb_hf_path").input(path)
    next(b for b in at.sidebar.button if b.key == "sb_hf_import").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return " ".join(e.value for e in at.sidebar.error) or " ".join(s.value for s in at.sidebar.success)


def _files(root: Path) -> dict:
    out = {}
    for d, dirs, fs in os.walk(root):
        for n in dirs + fs:
            p = Path(d) / n
            out[str(p)] = (p.lstat().st_size, p.lstat().st_mtime_ns)
    return out


def test_on_every_interface_with_no_roots_there_is_no_folder_box(address, monkeypatch):
    monkeypatch.delenv(folder_access.ROOTS_ENV, raising=False)
    for value in (None, "0.0.0.0"):
        address(value)
        at = _app()
        assert not [t for t in at.sidebar.text_input if t.key == "sb_hf_path"], value
        assert "Open a local folder" not in [e.label for e in at.sidebar.expander]


def test_below_the_roots_one_model_opens_and_every_attack_gets_the_same_message(address, monkeypatch, tmp_path,
                                                                              _runs_dir_in_tmp):
    address("0.0.0.0")
    root = tmp_path / "srv" / "models"
    model_folder(root / "good")
    model_folder(tmp_path / "secret")
    (root / "plain").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret")
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{not json")
    other = workspace_run(OWNER, "someone else's run")
    monkeypatch.setenv(folder_access.ROOTS_ENV, os.pathsep.join([str(root), str(_runs_dir_in_tmp)]))
    at = _app()
    before = _files(tmp_path)
    answers = {}
    for path in (str(other), str(other.parent), "/etc", "/root", "/proc/self", str(root / "missing"),
                 str(root / "plain"), str(root / "escape"), str(root / "broken"), str(tmp_path / "secret"),
                 f"{root}/../secret", str(root / "good") + "\x00", "/" + "a" * 4096, str(root).replace("o", "о"),
                 "~", "good"):
        answers[path] = _open(at, path)
        assert _active(at) == UNTRAINED, path
    assert set(answers.values()) == {str(folder_access.REFUSED)}, answers
    assert _files(tmp_path) == before, "a refused path changed something on disk"
    assert "Opened" in _open(at, str(root / "good")) and _active(at) == "**Active model:** folder: good"


def test_roots_set_but_empty_hide_the_box_even_on_loopback(address, monkeypatch):
    address("127.0.0.1")
    monkeypatch.setenv(folder_access.ROOTS_ENV, "none")
    at = _app()
    assert not [t for t in at.sidebar.text_input if t.key == "sb_hf_path"]


def test_a_personal_machine_opens_any_folder_but_no_workspace_run_by_path(address, monkeypatch, tmp_path):
    address("localhost")
    monkeypatch.delenv(folder_access.ROOTS_ENV, raising=False)
    model_folder(tmp_path / "mine")
    other = workspace_run(OWNER, "another workspace's run")
    at = _app()
    assert _open(at, str(other)) == str(folder_access.IN_WORKSPACES) and _active(at) == UNTRAINED
    assert "is not a folder on this server" in _open(at, str(tmp_path / "missing"))  # a personal machine is told
    assert "Opened" in _open(at, str(tmp_path / "mine")) and _active(at) == "**Active model:** folder: mine"


def test_a_stored_folder_key_is_checked_again_under_the_policy(address, monkeypatch, tmp_path):
    """A workspace.json written before the server was restarted with a stricter policy opens nothing."""
    address("0.0.0.0")
    monkeypatch.delenv(folder_access.ROOTS_ENV, raising=False)
    model_folder(tmp_path / "teacher")
    runs.write_workspace(VIEWER, active=f"dir:{tmp_path / 'teacher'}")
    at = _app(ws=VIEWER)
    assert _active(at) == UNTRAINED


def _share(owner_at: AppTest) -> str:
    next(b for b in owner_at.sidebar.button if b.key == "sb_run_share").click()
    owner_at.run()
    assert not owner_at.exception, [e.value for e in owner_at.exception]
    code = [c.value for c in owner_at.sidebar.code]
    assert len(code) == 1 and code[0].startswith("?share="), code
    return code[0].split("=", 1)[1]


def test_a_read_only_link_shows_one_run_on_every_page_and_offers_nothing_else(_runs_dir_in_tmp):
    workspace_run(OWNER, "private run")
    shared = workspace_run(OWNER, "shared run")  # newest: the run list selects it
    owner = _app(ws=OWNER)
    sid = _share(owner)
    assert sid not in (OWNER, shared.name) and share_links.lookup(sid) == shared

    viewer = _app(share=sid)
    assert _active(viewer) == "**Active model:** shared, read-only: shared run"
    assert viewer.query_params["share"] in (sid, [sid]) and viewer.query_params["ws"] != OWNER
    keys = {b.key for b in viewer.sidebar.button}
    assert "sb_share_copy" in keys and not keys & {"sb_run_delete", "sb_run_rename", "sb_run_resume", "sb_run_share"}
    assert not [t for t in viewer.sidebar.text_input if t.key == "sb_hf_path"]
    switch = next(s for s in viewer.sidebar.selectbox if s.label == "Switch model")
    assert not [o for o in switch.options if "private run" in o]
    shown = " ".join(str(e.value) for e in list(viewer.main.markdown) + list(viewer.main.caption))
    assert OWNER not in shown
    for fname in _page_files():
        viewer.switch_page(f"app_pages/{fname}").run()
        assert not viewer.exception, (fname, [e.value for e in viewer.exception])
        assert _active(viewer) == "**Active model:** shared, read-only: shared run", fname
        page_text = " ".join(str(e.value) for e in list(viewer.main.markdown) + list(viewer.main.caption)
                             + list(viewer.main.code))
        assert OWNER not in page_text, fname
    viewer.switch_page("app_pages/train.py").run()
    assert next(b for b in viewer.button if b.key == "train_start").disabled
    assert READ_ONLY in [i.value for i in viewer.info]
    before = _files(shared)
    next(b for b in viewer.sidebar.button if b.key == "sb_share_copy").click()
    viewer.run()
    assert not viewer.exception and _active(viewer) == "**Active model:** copy of shared run"
    ws = viewer.session_state["bx_ws"]
    assert [r.name for r in runs.list_runs(runs.workspace_dir(ws))] == ["copy of shared run"]
    assert _files(shared) == before and "share" not in viewer.query_params

    next(b for b in owner.sidebar.button if b.key == "sb_run_revoke").click()
    owner.run()
    assert share_links.lookup(sid) is None
    late = _app(share=sid)
    assert _active(late) == UNTRAINED and str(share_links.DEAD) in [w.value for w in late.sidebar.warning]
    assert "share" not in late.query_params


def test_forged_and_malformed_link_values_open_nothing_and_change_nothing(_runs_dir_in_tmp):
    d = workspace_run(OWNER, "r")
    sid = share_links.create(OWNER, d.name)
    before = _files(_runs_dir_in_tmp)
    for query in ({"share": OWNER}, {"share": d.name}, {"share": "../" + sid}, {"share": sid[:-1] + "!"},
                  {"share": "x" * 4096}, {"run": d.name}, {"ft": d.name}, {"ws": "../../" + OWNER},
                  {"ws": OWNER + "\x00"}, {"ws": "a" * 4096}):
        at = _app(**query)
        assert _active(at) == UNTRAINED, query
        assert at.session_state["bx_ws"] != OWNER, query
        assert not [r for r in runs.list_runs(runs.workspace_dir(at.session_state["bx_ws"], create=False))]
    assert {p for p in _files(_runs_dir_in_tmp) if "workspaces" not in p or OWNER in p} == \
        {p for p in before if "workspaces" not in p or OWNER in p}
    assert _files(d) == {p: v for p, v in before.items() if p.startswith(str(d) + os.sep)}
