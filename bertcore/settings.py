"""Server settings read from the environment (``BERTCORE_*``): the one place a number is read from it.

Each setting is read when it is used, never at import, so a server picks up a changed value on its next use
and a bad value cannot stop a module from loading. A value that is not a number raises ``ConfigError``
naming the variable, what it holds and what to set instead; a number out of range is clamped to it.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from bertcore.errors import ConfigError
from bertcore.message import Message


def env_number(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None,
               integer: bool = False) -> float:
    """``$name`` as a number (``default`` when unset or blank), clamped to [minimum, maximum].

    ConfigError when it is set to something that is not a (whole, with ``integer``) finite number."""
    raw = os.environ.get(name, "").strip()
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
                                          name=name, value=repr(raw), default=f"{default:g}"))
            raise ConfigError(Message("environment variable {name}={value} is not a number; set it to a number "
                                      "(default {default}) or unset it, then restart",
                                      name=name, value=repr(raw), default=f"{default:g}"))
    if minimum is not None:
        value = max(minimum, value)
    if maximum is not None:
        value = min(maximum, value)
    return int(value) if integer else value


def runs_root() -> Path:
    """The root of all runs: env BERTCORE_RUNS_DIR, else $XDG_DATA_HOME/bertcore/runs, else ~/.local/share/..."""
    env = os.environ.get("BERTCORE_RUNS_DIR", "").strip()
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "bertcore" / "runs").resolve()
