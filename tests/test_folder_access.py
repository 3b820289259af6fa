"""The folder policy of "Open a local folder" (explorer.session.folder_access), tried as an attacker would, without Streamlit.

Where the server listens decides the default (loopback: any folder; any other address: none); BERTCORE_OPEN_ROOTS,
when set, decides on any address. In the roots mode every path an attacker tries is refused the same way (None):
outside the roots, a symlink out of them, `..`, NUL, 4 KB, Unicode look-alikes, /proc/self, /etc, /root, a missing
folder, a folder that is not a model, a browser workspace's run below a root; and nothing on disk changes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from explorer.session import folder_access as fa


@pytest.mark.parametrize("address, env, via_proxy, mode", [
    (None, {}, False, fa.NONE),            # Streamlit's default: every interface
    ("", {}, False, fa.NONE),
    ("0.0.0.0", {}, False, fa.NONE),
    ("::", {}, False, fa.NONE),
    ("192.168.1.20", {}, False, fa.NONE),
    ("unix:///run/bx.sock", {}, False, fa.NONE),
    ("localhost", {}, False, fa.ANY),        # the README's first command
    ("127.0.0.1", {}, False, fa.ANY),
    ("127.4.5.6", {}, False, fa.ANY),
    ("::1", {}, False, fa.ANY),
    ("[::1]", {}, False, fa.ANY),
    ("127.0.0.1", {}, True, fa.NONE),       # behind nginx on the same machine (deploy/nginx-class.conf)
    ("localhost", {"BERTCORE_OPEN_ROOTS": "none"}, False, fa.NONE),  # set, but no absolute folder: hidden
    ("localhost", {"BERTCORE_OPEN_ROOTS": ""}, False, fa.NONE),
    ("localhost", {"BERTCORE_OPEN_ROOTS": "models:./x"}, False, fa.NONE),  # relative entries do not count
    ("0.0.0.0", {"BERTCORE_OPEN_ROOTS": "/srv/models"}, False, fa.ROOTS),
    ("localhost", {"BERTCORE_OPEN_ROOTS": "/srv/models"}, False, fa.ROOTS),  # set: it decides everywhere
])
def test_where_the_server_listens_decides_the_default(address, env, via_proxy, mode):
    p = fa.policy(address, env, via_proxy)
    assert p.mode == mode
    assert p.shows_box == (mode != fa.NONE) and p.restricted == (mode != fa.ANY)


def test_roots_are_absolute_resolved_and_separated_by_pathsep(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    env = {"BERTCORE_OPEN_ROOTS": os.pathsep.join([str(tmp_path / "alias"), "relative", "", "/srv/models"])}
    assert fa.policy("0.0.0.0", env).roots == ((tmp_path / "real").resolve(), Path("/srv/models"))


def test_a_request_through_a_proxy_is_told_by_its_headers():
    assert fa.proxied({"X-Forwarded-For": "10.0.0.7"}) and fa.proxied({"forwarded": "for=10.0.0.7"})
    assert fa.proxied({"X-Real-Ip": "10.0.0.7"})
    assert not fa.proxied({"Host": "localhost:8501", "Cookie": "x"}) and not fa.proxied(None)


def _tree(tmp_path: Path) -> dict:
    """Every file and folder below ``tmp_path`` with its size and modification time (links not followed)."""
    out = {}
    for dirpath, dirs, files in os.walk(tmp_path):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def disk(tmp_path):
    """<tmp>/srv/models/{good, plain, inner link out, runs/workspaces/<ws>/<run>}, <tmp>/secret/model."""
    root = tmp_path / "srv" / "models"
    for d in (root / "good", root / "good" / "sub", tmp_path / "secret" / "model", root / "plain"):
        d.mkdir(parents=True)
    for d in (root / "good", tmp_path / "secret" / "model"):
        (d / "config.json").write_text("{}")
    (root / "escape").symlink_to(tmp_path / "secret" / "model")
    (root / "etc").symlink_to("/etc")
    ws_run = root / "runs" / "workspaces" / ("w" * 22) / "20260101-run-abc123"
    ws_run.mkdir(parents=True)
    (ws_run / "config.json").write_text("{}")
    return tmp_path, root, ws_run


def test_a_model_folder_below_a_root_opens_and_nothing_else_does(disk):
    tmp_path, root, ws_run = disk
    forbidden = [root / "runs" / "workspaces"]
    before = _tree(tmp_path)
    assert fa.allowed(str(root / "good"), [root.resolve()], forbidden) == (root / "good").resolve()
    assert fa.allowed(f"  {root / 'good'}  ", [root.resolve()], forbidden) == (root / "good").resolve()
    attacks = [
        str(tmp_path / "secret" / "model"),            # outside the roots
        str(root / "escape"),                          # a symlink out of them
        str(root / "etc"),
        str(root / "good" / ".." / "good"),            # `..`, even when it would stay inside
        str(root / ".." / ".." / "secret" / "model"),
        str(root / "good") + "\x00",                   # NUL byte
        str(root) + "/go\nod", str(root) + "/\x1b[2Jgood",  # control characters inside
        str(root / "good") + "/" + "a" * 4096,        # 4 KB
        "/" + "x/" * 2048,
        str(root).replace("models", "mоdels") + "/good",  # Cyrillic о: a look-alike of the root
        str(root / "good").replace("/", "／"),         # fullwidth solidus
        str(root / "gооd"),                            # look-alike of the model's own name
        "/proc/self", "/proc/self/cwd", "/etc", "/root", "/", "~", "~root",
        str(root / "missing"),                         # missing
        str(root / "plain"),                           # a folder that is not a model
        str(root / "good" / "sub"),
        str(root / "good" / "config.json"),            # a file
        str(ws_run),                                   # a browser workspace's run, even below a root
        "good", "srv/models/good", "./good",           # relative
        "", "   ", None, 42, b"/etc",
    ]
    for raw in attacks:
        assert fa.allowed(raw, [root.resolve()], forbidden) is None, raw
    assert _tree(tmp_path) == before, "a refusal changed something on disk"


def test_a_root_of_slash_still_never_opens_proc_sys_or_dev(tmp_path):
    for raw in ("/proc/self", "/proc/1", "/sys/kernel", "/dev/shm"):
        assert fa.allowed(raw, [Path("/")]) is None, raw


def test_the_refusal_is_one_message_that_names_nothing_on_the_disk():
    text = str(fa.REFUSED)
    assert "{" not in text and "/" not in text and "config.json" not in text
    for word in ("exist", "missing", "symlink", "permission", "not a folder"):
        assert word not in text.lower()


def test_the_personal_machine_still_refuses_workspace_runs_by_path(disk):
    tmp_path, root, ws_run = disk
    assert fa.in_forbidden(str(ws_run), [root / "runs" / "workspaces"])
    assert fa.in_forbidden(str(root / "escape" / ".." / "runs" / "workspaces"), [root / "runs" / "workspaces"]) is False
    assert not fa.in_forbidden(str(root / "good"), [root / "runs" / "workspaces"])
