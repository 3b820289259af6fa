"""Server settings read from the environment (``BERTCORE_*``): the one table of them and the one place they are read.

``SETTINGS`` names every variable with its kind, default, range and what it limits; docs/LIMITS.md's "All
settings" table is written from it (``python -m bertcore.settings --write docs/LIMITS.md``) and a test keeps the
two equal. Each setting is read when it is used, never at import, so a server picks up a changed value on its
next use and a bad value cannot stop a module from loading. A value that cannot be read raises ``ConfigError``
naming the variable, what it holds and what to set instead; a number out of range is clamped to it.
``check_all`` asks every set variable at once, so a server or the CLI can refuse a bad value at start-up in one
clear line instead of at the first click that needs it.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bertcore.errors import ConfigError
from bertcore.message import Message, reason

WHOLE, NUMBER, FLAG, PATH, PATHS, DEVICE = "whole number", "number", "flag", "path", "path list", "device name"
APP, CLI, BOTH = "app", "CLI", "app, CLI"  # who reads a setting: the server (with its trainings), the CLI, both
DEVICE_NAMES = ("auto", "cpu", "cuda")  # bertcore.training.device.DEVICES (a test keeps them equal; no torch here)
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"  # docs/LIMITS.md's generated table


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str
    default: float | str  # the value when unset or blank; for a path, the text that says what is used then
    meaning: str  # one line: what it limits (docs/LIMITS.md)
    minimum: float | None = None
    maximum: float | None = None
    used_by: str = APP

    def shown_default(self) -> str:
        return _show(self.default)

    def shown_range(self) -> str:
        if self.kind == FLAG:
            return "0 or 1"
        if self.kind == DEVICE:
            return ", ".join(DEVICE_NAMES)
        if self.kind in (PATH, PATHS):
            return "a folder" if self.kind == PATH else "absolute folders"
        if self.minimum is not None and self.maximum is not None:
            return f"{_show(self.minimum)}..{_show(self.maximum)}"
        if self.minimum is not None:
            return f"at least {_show(self.minimum)}"
        return "any"


TABLE = (
    # where things are kept, and what a run may hold
    Setting("BERTCORE_RUNS_DIR", PATH, "`$XDG_DATA_HOME/bertcore/runs`, else `~/.local/share/bertcore/runs`",
       "the root of all runs, workspaces, read-only links and derived data", used_by=BOTH),
    Setting("BERTCORE_OPEN_ROOTS", PATHS, "unset: any folder on a loopback address, none elsewhere",
       "the folders the sidebar's \"Open a local folder\" opens (os.pathsep-separated; `none`: no box)"),
    Setting("BERTCORE_MAX_CORPUS_BYTES", WHOLE, 5 * 1024 * 1024, "the largest corpus or task file read, in bytes",
       minimum=1, used_by=BOTH),
    Setting("BERTCORE_MAX_MODEL_MB", NUMBER, 1024, "the estimated training memory of one run, in MB", minimum=1,
       used_by=BOTH),
    Setting("BERTCORE_MAX_SAE_MB", NUMBER, 1024, "the memory one SAE's evaluation may use, in MB", minimum=1,
       used_by=BOTH),
    Setting("BERTCORE_MAX_SAVED_STEPS", WHOLE, 64, "the step files (weights over training) one run keeps", minimum=2,
       used_by=BOTH),
    Setting("BERTCORE_MAX_DERIVED_MB", NUMBER, 256, "the disk of the derived-data cache (probe results, feature tables), "
       "in MB; the least recently used go first", minimum=0.001, used_by=BOTH),
    Setting("BERTCORE_MAX_RUNS_PER_WORKSPACE", WHOLE, 20, "the runs (and saved fine-tune comparisons) one browser "
       "workspace keeps", minimum=1),
    Setting("BERTCORE_MAX_WORKSPACE_MB", NUMBER, 500, "the disk one browser workspace may use, in MB", minimum=0.001),
    # trainings started from the app
    Setting("BERTCORE_MAX_TRAININGS", WHOLE, 2,
            "the trainings, studies and SAE jobs running at once in one server process (one slot each)", minimum=1),
    Setting("BERTCORE_ABANDON_SECONDS", NUMBER, 10, "the seconds a training nobody polls (a closed tab) lives on",
       minimum=0.1),
    Setting("BERTCORE_TRAINING_NICE", WHOLE, 5, "the niceness of a training (0: as the server; pages first)",
       minimum=0, maximum=19),
    Setting("BERTCORE_TRAINING_PROCESS", FLAG, 1, "1: a training runs in its own process; 0: in a server thread"),
    Setting("BERTCORE_TRAINING_DEVICE", DEVICE, "auto", "where the app's trainings run (auto: the GPU when torch sees "
       "one)"),
    Setting("BERTCORE_DETERMINISTIC", FLAG, 0, "1: every training of the app as `train --deterministic`"),
    # the server process itself
    Setting("BERTCORE_SERVER_THREADS", WHOLE, 1, "torch's threads for the pages' own forwards", minimum=1, maximum=64),
    Setting("BERTCORE_SWITCH_INTERVAL", NUMBER, 0.001, "the seconds a server thread keeps the interpreter lock while "
       "others wait", minimum=0.0001, maximum=0.1),
    Setting("BERTCORE_GC_FREEZE", FLAG, 1, "1: the objects alive at the first page are frozen out of the garbage "
       "collector; 0: Python's defaults"),
    Setting("BERTCORE_PAGE_SLOTS", WHOLE, 2, "the page scripts running at once in one server process (0: no limit)",
       minimum=0, maximum=64),
    # one client cannot starve the class (explorer/session/client_limits.py, client_gate.py)
    Setting("BERTCORE_CLIENT_SESSIONS_PER_MINUTE", WHOLE, 30, "new sessions per client address and minute (0: no cap)",
       minimum=0),
    Setting("BERTCORE_CLIENT_RUNS_PER_MINUTE", WHOLE, 60, "page runs per client address and minute (0: no cap)",
       minimum=0),
    Setting("BERTCORE_CLIENT_STARTS_PER_MINUTE", WHOLE, 3, "trainings started per client address and minute (0: no cap)",
       minimum=0),
    Setting("BERTCORE_CLIENT_UPLOADS_PER_MINUTE", WHOLE, 10, "checkpoint zips loaded per client address and minute "
       "(0: no cap)", minimum=0),
    Setting("BERTCORE_CLIENT_BURST", WHOLE, 10, "the most of one capped action at once, then the cap's own pace "
       "(0: no pace)", minimum=0),
    Setting("BERTCORE_CLIENT_CAP_LOCAL", FLAG, 0, "1: connections from the server machine itself are capped too"),
    Setting("BERTCORE_CLIENT_REFUSED_DELAY", NUMBER, 3, "the seconds a refused page run or connection waits before it "
       "answers", minimum=0, maximum=30),
    Setting("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", WHOLE, 60, "serve.py: new websocket connections per client address and "
       "minute (0: off)", minimum=0),
    Setting("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE", WHOLE, 60, "serve.py: loads of the app's page per client address and "
       "minute (0: off)", minimum=0),
    Setting("BERTCORE_CLIENT_CONNECT_BURST", WHOLE, 10, "serve.py: the connections or page loads of one address at once",
       minimum=1),
    Setting("BERTCORE_CLIENT_CONNECTIONS", WHOLE, 100, "serve.py: websockets one client address holds open at once "
       "(0: off)", minimum=0),
    # the CLI
    Setting("BERTCORE_DEBUG", FLAG, 0, "1: an unexpected CLI error shows its traceback", used_by=CLI),
)
SETTINGS: dict[str, Setting] = {s.name: s for s in TABLE}


def _show(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def known(name: str) -> str:
    """``name`` itself, when it is a variable of ``SETTINGS`` (else KeyError): how a module holds a variable's name
    to put in a message without reading it elsewhere."""
    return SETTINGS[name].name


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    """The variable's text as set (None when unset): the project's one read of a BERTCORE_* variable."""
    return (os.environ if env is None else env).get(known(name))


def env_number(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None,
               integer: bool = False, env: Mapping[str, str] | None = None) -> float:
    """``$name`` as a number (``default`` when unset or blank), clamped to [minimum, maximum].

    ConfigError when it is set to something that is not a (whole, with ``integer``) finite number."""
    raw = (_raw(name, env) or "").strip()
    if not raw:
        value = float(default)
    else:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (integer and value != int(value)):
            if integer:
                raise ConfigError(Message("environment variable {name}={value} is not a whole number; set it to a "
                                          "whole number (default {default}) or unset it, then restart",
                                          name=name, value=repr(raw), default=_show(default)))
            raise ConfigError(Message("environment variable {name}={value} is not a number; set it to a number "
                                      "(default {default}) or unset it, then restart",
                                      name=name, value=repr(raw), default=_show(default)))
    if minimum is not None:
        value = max(minimum, value)
    if maximum is not None:
        value = min(maximum, value)
    return int(value) if integer else value


def _setting(name: str, kind: str) -> Setting:
    s = SETTINGS[name]
    if s.kind != kind:
        raise TypeError(f"{name} is a {s.kind}, not a {kind}")
    return s


def whole(name: str, env: Mapping[str, str] | None = None) -> int:
    """A whole-number setting, clamped to its range (ConfigError when it is not a whole number)."""
    s = _setting(name, WHOLE)
    return int(env_number(name, s.default, minimum=s.minimum, maximum=s.maximum, integer=True, env=env))


def number(name: str, env: Mapping[str, str] | None = None) -> float:
    """A number setting, clamped to its range (ConfigError when it is not a finite number)."""
    s = _setting(name, NUMBER)
    return float(env_number(name, s.default, minimum=s.minimum, maximum=s.maximum, env=env))


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """A 0|1 setting (a whole number past 1 counts as 1, below 0 as 0, as before); ConfigError for anything else."""
    s = _setting(name, FLAG)
    try:
        return bool(env_number(name, s.default, minimum=0, maximum=1, integer=True, env=env))
    except ConfigError:
        raise ConfigError(Message("environment variable {name}={value} is not 0 or 1; set it to 1 (on) or 0 (off), "
                                  "default {default}, or unset it, then restart", name=name,
                                  value=repr(_raw(name, env).strip()), default=_show(s.default))) from None


def path(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """A folder setting, ``~`` expanded and resolved; None when unset or blank (its caller knows the default)."""
    _setting(name, PATH)
    raw = (_raw(name, env) or "").strip()
    return Path(raw).expanduser().resolve() if raw else None


def paths(name: str, env: Mapping[str, str] | None = None) -> tuple[Path, ...] | None:
    """The absolute folders a path-list setting names (``os.pathsep``-separated), resolved, each once; relative or
    odd entries are dropped, so ``none`` names none. None when the variable is unset: set but empty is not unset."""
    _setting(name, PATHS)
    raw = _raw(name, env)
    if raw is None:
        return None
    out = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if part and "\x00" not in part and os.path.isabs(part):
            out.append(Path(os.path.realpath(part)))
    return tuple(dict.fromkeys(out))


def device(name: str, env: Mapping[str, str] | None = None) -> str:
    """A device-name setting, lower case (its default when unset or blank); ConfigError for a name not offered."""
    s = _setting(name, DEVICE)
    raw = (_raw(name, env) or "").strip()
    value = raw.lower() or str(s.default)
    if value not in DEVICE_NAMES:
        raise ConfigError(Message("environment variable {name}={value} is not one of {choices}; set it to one of "
                                  "them (default {default}) or unset it, then restart", name=name, value=repr(raw),
                                  choices=", ".join(DEVICE_NAMES), default=s.default))
    return value


READERS = {WHOLE: whole, NUMBER: number, FLAG: flag, PATH: path, PATHS: paths, DEVICE: device}


def runs_root() -> Path:
    """The root of all runs: env BERTCORE_RUNS_DIR, else $XDG_DATA_HOME/bertcore/runs, else ~/.local/share/..."""
    chosen = path("BERTCORE_RUNS_DIR")
    if chosen is not None:
        return chosen
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "bertcore" / "runs").resolve()


def check_all(used_by: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """One line per set variable whose value cannot be read (the variable, what it holds, what to set instead),
    in the table's order; [] when all are fine. ``used_by`` (APP or CLI): only the settings that reader uses.
    Each line is a ``Message``, so a page can show it translated."""
    bad = []
    for s in SETTINGS.values():
        if used_by is not None and used_by not in s.used_by:
            continue
        if _raw(s.name, env) is None:
            continue
        try:
            READERS[s.kind](s.name, env)
        except ConfigError as e:
            bad.append(reason(e))
    return bad


_REPORTED: set[str] = set()


def report(lines: list) -> None:
    """Print each bad setting once per process on the server's terminal, as ``bertcore: error: ...``: whoever
    started the server sees why its pages refuse to open."""
    for line in map(str, lines):
        if line not in _REPORTED:
            _REPORTED.add(line)
            print(f"bertcore: error: {line}", file=sys.stderr, flush=True)


def markdown_table() -> str:
    """docs/LIMITS.md's "All settings" table, one row per variable of ``SETTINGS``."""
    rows = ["| Variable | Kind | Default | Range | What it limits | Read by |", "|---|---|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.name}` | {s.kind} | {s.shown_default()} | {s.shown_range()} | "
                    f"{s.meaning} | {s.used_by} |")
    return "\n".join(rows)


def with_table(text: str) -> str:
    """``text`` (docs/LIMITS.md) with the table between the ``BEGIN`` / ``END`` markers written anew."""
    head, found, rest = text.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not (found and found_end):
        raise ValueError(f"the markers {BEGIN} and {END} are missing")
    return f"{head}{BEGIN}\n{markdown_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    """``python -m bertcore.settings``: print the table; ``--write FILE``: write it between FILE's markers."""
    if argv[:1] == ["--write"] and len(argv) == 2:
        target = Path(argv[1])
        target.write_text(with_table(target.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m bertcore.settings [--write docs/LIMITS.md]", file=sys.stderr)
        return 2
    print(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
