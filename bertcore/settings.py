"""Server settings read from the environment (``BERTCORE_*``): the one place a number is read from it.

Each setting is read when it is used, never at import, so a server picks up a changed value on its next use
and a bad value cannot stop a module from loading. A value that is not a number raises ``ConfigError``
naming the variable, what it holds and what to set instead; a number out of range is clamped to it.
"""
from __future__ import annotations

import math
import os

from bertcore.errors import ConfigError


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
            kind = "a whole number" if integer else "a number"
            raise ConfigError(f"environment variable {name}={raw!r} is not {kind}; set it to {kind} "
                              f"(default {default:g}) or unset it, then restart")
    if minimum is not None:
        value = max(minimum, value)
    if maximum is not None:
        value = min(maximum, value)
    return int(value) if integer else value
