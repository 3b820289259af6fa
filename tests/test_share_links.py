"""Read-only links to one run (explorer.session.share_links), the registry on disk without Streamlit: a link opens exactly its
run while both its files agree; a revoked id, another workspace's ids, malformed ids and a deleted run open nothing;
a copy is a whole new run of the viewer's workspace; two replicas (two readers of one runs folder) agree."""
from __future__ import annotations

import json
import os

import pytest

from bertcore.errors import InputError
from bertcore.training import runs
from explorer.session import share_links
from tiny_runs import workspace_run

OWNER, VIEWER = "owner-workspace-0001xyz", "viewer-workspace-0002xy"


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, _, fs in os.walk(root) for n in fs}


def test_a_link_opens_its_run_only_and_revoking_ends_it(_runs_dir_in_tmp):
    mine = workspace_run(OWNER, "my best run")
    other = workspace_run(OWNER, "my other run")
    sid = share_links.create(OWNER, mine.name)
    assert share_links.valid_share_id(sid) and sid != OWNER and OWNER not in sid
    assert share_links.create(OWNER, mine.name) == sid  # the same link again, not a second one
    assert share_links.lookup(sid) == mine and share_links.share_of(OWNER, other.name) is None
    entry = json.loads((_runs_dir_in_tmp / "shares" / f"{sid}.json").read_text())
    assert entry["workspace"] == OWNER and entry["run"] == mine.name
    assert share_links.revoke(OWNER, mine.name) is True
    assert share_links.lookup(sid) is None and share_links.share_of(OWNER, mine.name) is None
    assert not (_runs_dir_in_tmp / "shares" / f"{sid}.json").exists()
    assert share_links.revoke(OWNER, mine.name) is False
    assert share_links.create(OWNER, mine.name) != sid  # a new link gets a new id; the old one stays dead
    assert share_links.lookup(sid) is None


def test_half_a_link_opens_nothing(_runs_dir_in_tmp):
    """A crash between the two writes (either order) leaves a link that does not open."""
    d = workspace_run(OWNER, "r")
    sid = share_links.create(OWNER, d.name)
    owner_file = runs.workspace_dir(OWNER) / share_links.OWNER_DIR / f"{d.name}.json"
    saved = owner_file.read_text()
    owner_file.unlink()
    assert share_links.lookup(sid) is None
    owner_file.write_text(saved)
    assert share_links.lookup(sid) == d
    (_runs_dir_in_tmp / "shares" / f"{sid}.json").unlink()
    assert share_links.lookup(sid) is None and share_links.share_of(OWNER, d.name) is None


def test_ids_that_are_not_a_live_link_open_nothing_and_change_nothing(_runs_dir_in_tmp):
    d = workspace_run(OWNER, "r")
    sid = share_links.create(OWNER, d.name)
    before = _files(_runs_dir_in_tmp)
    for bad in (OWNER, d.name, sid[:-1], sid + "A", "../" + sid, f"../workspaces/{OWNER}", sid.upper()
                if sid.upper() != sid else sid.lower(), "\x00" * 22, "a" * 4096, "", None, 7, ["x"]):
        assert share_links.lookup(bad) is None, bad
        with pytest.raises(InputError):
            share_links.copy_run(bad, runs.workspace_dir(VIEWER))
    assert share_links.revoke(VIEWER, d.name) is False  # another workspace cannot revoke it ...
    assert share_links.revoke("../" + OWNER, d.name) is False
    with pytest.raises(InputError):
        share_links.create(VIEWER, d.name)  # ... nor share the owner's run from its own workspace
    assert share_links.lookup(sid) == d
    assert _files(_runs_dir_in_tmp) == before


def test_a_deleted_run_or_a_training_one_is_not_shared(_runs_dir_in_tmp):
    d = workspace_run(OWNER, "r")
    sid = share_links.create(OWNER, d.name)
    runs.delete_run(d, root=runs.workspace_dir(OWNER))
    assert share_links.lookup(sid) is None
    live = workspace_run(OWNER, "live")
    runs.update_run_json(live, status="running", pid=os.getpid())
    runs.mark_active(live, True)
    try:
        with pytest.raises(InputError, match="finished or stopped"):
            share_links.create(OWNER, live.name)
    finally:
        runs.mark_active(live, False)


def test_a_copy_is_a_whole_run_of_the_viewer_and_leaves_the_original(_runs_dir_in_tmp):
    d = workspace_run(OWNER, "the shared run")
    (d / ".lock").write_text("")
    (d / "escape").symlink_to("/etc")
    original = {f: (d / f).read_bytes() for f in _files(d) if f != "escape"}
    sid = share_links.create(OWNER, d.name)
    copy = share_links.copy_run(sid, runs.workspace_dir(VIEWER))
    assert copy.parent == runs.workspace_dir(VIEWER)
    info = runs.read_run(copy)
    assert info.loadable and info.name == "copy of the shared run" and not info.damaged
    assert (copy / "model.safetensors").read_bytes() == (d / "model.safetensors").read_bytes()
    assert not (copy / ".lock").exists() and not (copy / "escape").exists()
    assert not [p for p in runs.workspace_dir(VIEWER).iterdir() if p.name.startswith(".copy-")]
    assert {f: (d / f).read_bytes() for f in _files(d) if f != "escape"} == original
    assert [r.id for r in runs.list_runs(runs.workspace_dir(VIEWER))] == [copy.name]
    assert share_links.share_of(VIEWER, copy.name) is None  # the copy is not shared


def test_two_replicas_on_one_runs_folder_agree(_runs_dir_in_tmp, tmp_path):
    """A link made by one server process opens in another (a fresh interpreter), and a revoke in one ends it in both."""
    import subprocess
    import sys
    from pathlib import Path

    d = workspace_run(OWNER, "r")
    sid = share_links.create(OWNER, d.name)
    code = ("import sys; from explorer.session import share_links as s; p = s.lookup(sys.argv[1]); "
            "print(p.name if p else 'none')")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    ask = lambda: subprocess.run([sys.executable, "-c", code, sid], capture_output=True, text=True, env=env,  # noqa: E731
                                 cwd=tmp_path, timeout=120).stdout.strip()
    assert ask() == d.name
    share_links.revoke(OWNER, d.name)
    assert ask() == "none"


# ----------------------------------------------------------------------------- a study (bertcore.launch.study)
def test_a_study_link_opens_the_study_and_its_runs_by_name_only(_runs_dir_in_tmp, tmp_path):
    from bertcore.launch import study as S
    from test_lab_page import study_on_disk

    folder = study_on_disk(OWNER)
    sid = share_links.create(OWNER, folder.name)
    assert share_links.lookup(sid) == folder and share_links.is_study(folder)
    first = "mlm-probability-0-15-seed0"
    assert share_links.first_run(sid) == first  # the first scored run in the study's order
    assert share_links.lookup_run(sid, "mlm-probability-0-3-seed2") == folder / S.RUNS_DIR / "mlm-probability-0-3-seed2"
    assert share_links.resolve(f"{sid}/{first}") == folder / S.RUNS_DIR / first and share_links.resolve(sid) == folder
    other = workspace_run(OWNER, "not in the study")
    (folder / S.RUNS_DIR / "escape-seed0").symlink_to(other)  # a link inside runs/ leads nowhere either
    (folder / S.RUNS_DIR / "empty-seed0").mkdir()  # no weights
    for bad in ("..", f"../{other.name}", other.name, f"{first}/..", f"{first}/../{first}", "escape-seed0",
                "empty-seed0", "missing-seed0", first.upper(), "", "x" * 200, None, 7):
        assert share_links.lookup_run(sid, bad) is None, bad
        assert share_links.resolve(f"{sid}/{bad}") is None, bad
    assert share_links.lookup_run(share_links.create(OWNER, other.name), first) is None  # a run's link has no runs

    with pytest.raises(InputError, match="not copied whole"):
        share_links.copy_run(sid, runs.workspace_dir(VIEWER))
    copy = share_links.copy_run(f"{sid}/{first}", runs.workspace_dir(VIEWER))
    assert runs.read_run(copy).loadable and runs.read_run(copy).name == "copy of custom · mlm_probability=0.15 · seed 0"
    assert (copy / "model.safetensors").read_bytes() == (folder / S.RUNS_DIR / first / "model.safetensors").read_bytes()
    assert share_links.revoke(OWNER, folder.name)
    assert share_links.lookup(sid) is None and share_links.lookup_run(sid, first) is None


def test_a_study_is_shared_whatever_its_status_but_not_when_damaged(_runs_dir_in_tmp):
    import json as _json

    from bertcore.launch import study as S
    from test_lab_page import study_on_disk

    folder = study_on_disk(OWNER)
    data = _json.loads((folder / S.STUDY_FILE).read_text())
    runs.update_run_json(folder, status="running", pid=os.getpid())
    runs.mark_active(folder, True)  # the study runs in this process
    try:
        assert runs.read_run(folder).live and share_links.create(OWNER, folder.name)
    finally:
        runs.mark_active(folder, False)
    broken = study_on_disk(OWNER)
    (broken / S.STUDY_FILE).unlink()  # run.json says study, the study itself is gone: damaged
    assert runs.read_run(broken).damaged
    with pytest.raises(InputError, match="damaged"):
        share_links.create(OWNER, broken.name)
    assert data["done"] == data["total"] == 6
