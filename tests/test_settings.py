"""The one table of BERTCORE_* settings (bertcore.settings): every product file reads them through it, a bad
value of each kind is one clear line from ``check_all`` (on the app's page and from the CLI, never a traceback),
the values keep their defaults and clamping, and docs/LIMITS.md's table is the table."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bertcore import settings
from bertcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
NAME = re.compile(r"BERTCORE_[A-Z0-9_]*")  # also the bare prefix, as a name built at run time starts
MENTION = re.compile(r"BERTCORE_[A-Z0-9_]+")
GOOD = {settings.WHOLE: "3", settings.NUMBER: "2.5", settings.FLAG: "1", settings.DEVICE: "cpu",
        settings.PATH: "/tmp", settings.PATHS: "/srv/models"}
BAD = {settings.WHOLE: "ten", settings.NUMBER: "lots", settings.FLAG: "yes", settings.DEVICE: "tpu"}


def product_files() -> list[Path]:
    """The files a server or the CLI runs: the library, the app and its pages (not bench, loadgen, scripts, tests,
    which may set variables for the processes they start)."""
    files = [ROOT / "app.py", ROOT / "serve.py"]
    for sub in ("bertcore", "explorer", "app_pages"):
        files += sorted((ROOT / sub).rglob("*.py"))
    return [p for p in files if p != ROOT / "bertcore" / "settings.py"]


def _is_environ(node) -> bool:
    """``os.environ`` or a bare ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and
                                                                           node.id == "environ")


def _literal_names(tree) -> dict[str, set[str]]:
    """Loop and comprehension variables that only take string literals: ``for k in ("A", "B")``."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.comprehension, ast.For)) and isinstance(node.target, ast.Name) and \
                isinstance(node.iter, (ast.Tuple, ast.List)) and \
                all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
            out.setdefault(node.target.id, set()).update(e.value for e in node.iter.elts)
    return out


def _settings_calls(tree) -> list[ast.Call]:
    """The ``settings.<function>(...)`` calls of a module that imports ``from bertcore import settings``."""
    if not any(isinstance(n, ast.ImportFrom) and n.module == "bertcore" and
               any(a.name == "settings" and a.asname in (None, "settings") for a in n.names) for n in ast.walk(tree)):
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "settings"]


def bertcore_reads(source: str, filename: str = "<string>") -> list[str]:
    """Each place in ``source`` that could read a BERTCORE_* variable without bertcore.settings: a string that is
    a variable's name (or its prefix) anywhere but as the first argument of a ``settings.<function>(...)`` call,
    and any read of the environment through a key that is not a literal."""
    tree = ast.parse(source, filename=filename)
    allowed = {id(n.args[0]) for n in _settings_calls(tree)}
    literal_names = _literal_names(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value) and \
                id(node) not in allowed:
            out.append(f"{filename}:{node.lineno}: {node.value!r} outside a bertcore.settings call")
        key = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) and (
                (node.func.attr in ("get", "pop") and _is_environ(node.func.value)) or
                (node.func.attr == "getenv" and isinstance(node.func.value, ast.Name) and node.func.value.id == "os")):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key = node.left
        if key is None or (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        if isinstance(key, ast.Name) and key.id in literal_names and \
                not any(NAME.match(v) for v in literal_names[key.id]):
            continue
        out.append(f"{filename}:{node.lineno}: the environment read through a computed name")
    return out


def test_no_product_file_reads_a_bertcore_variable_outside_settings():
    files = product_files()
    assert len(files) > 100 and ROOT / "explorer" / "launch" / "training_slots.py" in files
    bad = [hit for p in files for hit in bertcore_reads(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert not bad, "read these through bertcore.settings (its table SETTINGS):\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    'import os\nx = os.environ.get("BERTCORE_MAX_TRAININGS", "2")\n',
    'import os\nx = os.getenv("BERTCORE_DEBUG")\n',
    'import os\nx = os.environ["BERTCORE_PAGE_SLOTS"]\n',
    'from os import environ\nx = "BERTCORE_DEBUG" in environ\n',
    'from bertcore.settings import env_number\nx = env_number("BERTCORE_MAX_MODEL_MB", 1024)\n',
    'ROOTS = "BERTCORE_OPEN_ROOTS"\n',
    'settings = {}\nx = settings.get("BERTCORE_DEBUG")\n',  # a dict named settings is not bertcore.settings
    'import os\nx = os.environ.get(f"BERTCORE_{name}")\n',
    'import os\nx = os.environ.get("BERTCORE_" + name)\n',
    'import os\nkey = pick()\nx = os.environ.get(key)\n',
    'import os\nx = [os.environ.get(k) for k in ("HOME", "BERTCORE_DEBUG")]\n',
])
def test_the_scanner_finds_a_planted_read(planted):
    assert bertcore_reads(planted), planted


def test_the_scanner_lets_settings_calls_messages_and_other_variables_pass():
    clean = ('from bertcore import settings\nimport os\n'
             'n = settings.whole("BERTCORE_MAX_TRAININGS")\nname = settings.known("BERTCORE_OPEN_ROOTS")\n'
             'text = "the limit is set by BERTCORE_MAX_TRAININGS"\nhome = os.environ.get("HOME")\n'
             'missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]\n'
             'env = dict(os.environ)\n')
    assert bertcore_reads(clean) == []


def test_every_settings_call_names_a_variable_of_the_table_with_its_kind():
    readers = {fn.__name__: kind for kind, fn in settings.READERS.items()}
    bad, seen = [], set()
    for p in product_files():
        for n in _settings_calls(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                name, fn = n.args[0].value, n.func.attr
                seen.add(name)
                if name not in settings.SETTINGS:
                    bad.append(f"{p.relative_to(ROOT)}:{n.lineno}: {name} is not in SETTINGS")
                elif fn in readers and readers[fn] != settings.SETTINGS[name].kind:
                    bad.append(f"{p.relative_to(ROOT)}:{n.lineno}: {name} is a {settings.SETTINGS[name].kind}")
    assert not bad, bad
    unused = set(settings.SETTINGS) - seen - {"BERTCORE_RUNS_DIR"}  # runs_root() reads it inside settings.py
    assert not unused, f"in SETTINGS but read nowhere: {sorted(unused)}"


def test_the_table_describes_every_setting():
    assert len(settings.SETTINGS) == 31
    for s in settings.SETTINGS.values():
        assert s.kind in settings.READERS and s.meaning and s.used_by in (settings.APP, settings.CLI, settings.BOTH)
        if s.kind in (settings.WHOLE, settings.NUMBER, settings.FLAG):
            assert isinstance(s.default, (int, float)), s.name
            assert s.minimum is None or s.default >= s.minimum, s.name
            assert s.maximum is None or s.default <= s.maximum, s.name


def test_the_table_agrees_with_the_code_it_stands_for():
    from bertcore.data.corpus import MAX_CORPUS_BYTES
    from bertcore.training.device import DEVICES

    assert settings.DEVICE_NAMES == DEVICES
    assert settings.SETTINGS["BERTCORE_MAX_CORPUS_BYTES"].default == MAX_CORPUS_BYTES


# ---------------------------------------------------------------------------------------------- values
@pytest.fixture
def bare(monkeypatch):
    """No BERTCORE_* setting of the table set but the test's own runs folder (tests/conftest.py)."""
    for name in settings.SETTINGS:
        if name != "BERTCORE_RUNS_DIR":
            monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_unset_means_the_default_and_each_use_reads_the_variable_again(bare):
    from explorer import server_process
    from explorer.launch import training_slots
    from explorer.session import client_limits

    assert training_slots.max_trainings() == 2 and server_process.server_threads() == 1
    assert client_limits.cap("start") == 3 and training_slots.own_process() is True
    assert training_slots.abandon_seconds() == 10.0 and server_process.switch_interval() == 0.001
    bare.setenv("BERTCORE_MAX_TRAININGS", "5")
    bare.setenv("BERTCORE_SERVER_THREADS", " 4 ")
    bare.setenv("BERTCORE_CLIENT_STARTS_PER_MINUTE", "")  # blank: the default
    bare.setenv("BERTCORE_TRAINING_PROCESS", "0")
    assert training_slots.max_trainings() == 5 and server_process.server_threads() == 4
    assert client_limits.cap("start") == 3 and training_slots.own_process() is False


def test_out_of_range_values_are_clamped_as_before(bare):
    from explorer.launch import training_slots
    from explorer.session import client_limits

    for name, value, expect in [("BERTCORE_TRAINING_NICE", "50", 19), ("BERTCORE_MAX_TRAININGS", "0", 1),
                                ("BERTCORE_CLIENT_UPLOADS_PER_MINUTE", "-5", 0), ("BERTCORE_PAGE_SLOTS", "100", 64),
                                ("BERTCORE_SWITCH_INTERVAL", "5", 0.1), ("BERTCORE_MAX_SAVED_STEPS", "1", 2)]:
        bare.setenv(name, value)
        kind = settings.SETTINGS[name].kind
        assert settings.READERS[kind](name) == expect, name
    bare.setenv("BERTCORE_CLIENT_CAP_LOCAL", "7")  # a flag past 1 is on, as it was
    assert client_limits.cap_local() is True
    bare.setenv("BERTCORE_TRAINING_DEVICE", " CPU ")
    assert training_slots.training_runtime().device == "cpu"
    assert settings.check_all() == []


def test_a_good_environment_checks_clean(bare):
    for name, s in settings.SETTINGS.items():
        bare.setenv(name, GOOD[s.kind])
    assert settings.check_all() == [] and settings.check_all(settings.CLI) == []
    assert settings.check_all(env={}) == []


@pytest.mark.parametrize("kind", sorted(BAD))
def test_check_all_gives_one_line_per_bad_value_naming_it(bare, kind):
    names = [n for n, s in settings.SETTINGS.items() if s.kind == kind]
    for name in names:
        bare.setenv(name, BAD[kind])
    lines = settings.check_all()
    assert len(lines) == len(names)
    for name, line in zip(names, lines):
        assert f"{name}='{BAD[kind]}'" in line and "set it to" in line and "\n" not in line, line
        with pytest.raises(ConfigError, match=re.escape(line)):  # the same text as the use itself raises
            settings.READERS[kind](name)


def test_check_all_reads_only_the_settings_its_reader_uses(bare):
    bare.setenv("BERTCORE_PAGE_SLOTS", "two")  # the server's
    bare.setenv("BERTCORE_DEBUG", "yes")  # the CLI's
    bare.setenv("BERTCORE_MAX_MODEL_MB", "lots")  # both
    assert [line.split("=")[0] for line in settings.check_all(settings.APP)] == [
        "environment variable BERTCORE_MAX_MODEL_MB", "environment variable BERTCORE_PAGE_SLOTS"]
    assert [line.split("=")[0] for line in settings.check_all(settings.CLI)] == [
        "environment variable BERTCORE_MAX_MODEL_MB", "environment variable BERTCORE_DEBUG"]
    assert len(settings.check_all()) == 3


def test_the_existing_error_texts_are_kept(bare):
    bare.setenv("BERTCORE_MAX_WORKSPACE_MB", "garbage")
    bare.setenv("BERTCORE_MAX_SAVED_STEPS", "many")
    lines = settings.check_all()
    assert lines[0].startswith("environment variable BERTCORE_MAX_SAVED_STEPS='many' is not a whole number; set it to "
                               "a whole number (default 64)")
    assert lines[1].startswith("environment variable BERTCORE_MAX_WORKSPACE_MB='garbage' is not a number; set it to")


def test_open_roots_keeps_unset_apart_from_set_but_empty(bare, tmp_path):
    assert settings.paths("BERTCORE_OPEN_ROOTS") is None
    bare.setenv("BERTCORE_OPEN_ROOTS", "none")
    assert settings.paths("BERTCORE_OPEN_ROOTS") == ()
    assert settings.paths("BERTCORE_OPEN_ROOTS", {"BERTCORE_OPEN_ROOTS": f"{tmp_path}:rel"}) == (tmp_path.resolve(),)


def test_a_reader_of_the_wrong_kind_or_an_unknown_name_fails_loudly():
    with pytest.raises(TypeError):
        settings.whole("BERTCORE_MAX_MODEL_MB")  # a number, not a whole number
    with pytest.raises(KeyError):
        settings.known("BERTCORE_MAX_TRAINING")


# ---------------------------------------------------------------------------------------------- docs/LIMITS.md
def test_limits_md_holds_the_table_and_names_only_variables_of_it():
    text = (ROOT / "docs" / "LIMITS.md").read_text(encoding="utf-8")
    block = text.partition(settings.BEGIN)[2].partition(settings.END)[0].strip()
    assert block == settings.markdown_table(), "run: python -m bertcore.settings --write docs/LIMITS.md"
    rows = {line.split("|")[1].strip(" `"): line for line in block.splitlines()[2:]}
    for name, s in settings.SETTINGS.items():
        assert name in rows and f"| {s.shown_default()} |" in rows[name], name
    unknown = set(MENTION.findall(text)) - set(settings.SETTINGS)
    assert not unknown, f"docs/LIMITS.md names variables that are not in bertcore.settings.SETTINGS: {unknown}"
    assert settings.with_table(text) == text


def test_the_module_prints_the_table(capsys):
    assert settings.main([]) == 0
    assert capsys.readouterr().out.strip() == settings.markdown_table()
    assert settings.main(["--bogus"]) == 2


# ---------------------------------------------------------------------------------------------- app and CLI
def test_the_app_shows_a_bad_value_as_one_line_and_no_traceback(bare, capfd):
    from streamlit.testing.v1 import AppTest

    bare.setenv("BERTCORE_MAX_TRAININGS", "lots")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    line = ("environment variable BERTCORE_MAX_TRAININGS='lots' is not a whole number; set it to a whole number "
            "(default 2) or unset it, then restart")
    assert [e.value for e in at.error] == [line]
    AppTest.from_file(APP, default_timeout=60).run()  # a second session: the terminal has the line once
    assert capfd.readouterr().err.count(f"bertcore: error: {line}") == 1
    assert not at.title  # no page drawn
    bare.setenv("BERTCORE_TRAINING_DEVICE", "tpu")  # two bad values, a new session in Chinese: two lines
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception and len(at.error) == 2
    assert "BERTCORE_TRAINING_DEVICE='tpu'" in at.error[1].value and "环境变量" in at.error[1].value


def test_the_cli_refuses_a_bad_value_it_reads_with_error_and_exit_2(bare, capsys):
    from bertcore.cli import main

    bare.setenv("BERTCORE_MAX_SAVED_STEPS", "many")
    assert main(["presets", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: environment variable BERTCORE_MAX_SAVED_STEPS='many'") and "Traceback" not in err
    bare.delenv("BERTCORE_MAX_SAVED_STEPS")
    bare.setenv("BERTCORE_PAGE_SLOTS", "two")  # the server's own: no business of the CLI
    assert main(["presets", "--json"]) == 0
    capsys.readouterr()


def test_the_cli_entry_point_prints_one_error_line(bare, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "BERTCORE_DEBUG": "yes", "BERTCORE_RUNS_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "bertcore", "presets", "--json"], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: environment variable BERTCORE_DEBUG='yes' is not 0 or 1; set it to 1 "
                                     "(on) or 0 (off), default 0, or unset it, then restart"]
