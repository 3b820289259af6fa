"""Which folders the sidebar's "Open a local folder" may open: the server's own policy, pure (no Streamlit).

A server shared by a class must not let a browser read the disk: another student's run, the teacher's
checkpoints, ``/etc`` or ``/proc/self``. The rule, decided per session by ``policy`` from where the server
listens, the environment and whether the request came through a proxy:

* ``any`` (a personal machine): the server listens on a loopback address (``127.0.0.0/8``, ``::1``,
  ``localhost``) and the request came straight from the browser (no ``X-Forwarded-For``/``Forwarded``/
  ``X-Real-IP`` header). Any folder opens, and the messages say what is wrong with a path, as before.
  Streamlit's own default (``server.address`` unset) listens on **every** interface, so it is not loopback:
  the README's first command passes ``--server.address localhost``.
* ``roots``: ``BERTCORE_OPEN_ROOTS`` lists absolute folders (``os.pathsep``-separated). Whenever it is set it
  decides, on any address: only folders below one of them open.
* ``none``: not loopback and no ``BERTCORE_OPEN_ROOTS``, or the variable set but naming no absolute folder
  (``BERTCORE_OPEN_ROOTS=none``): the box is hidden and nothing opens by path.

Outside the loopback case every refusal is the one message ``REFUSED``, whatever the reason (outside the
roots, a symlink out of them, ``..``, ``/proc``, a missing folder, a folder that is not a model, a NUL byte, a
path of 4 KB, a look-alike character), so the box tells nothing about the disk. In every mode the folder of the
runs of the browser workspaces (``<runs root>/workspaces``) never opens by path: a browser's own runs open from
its run list, another workspace's never.
"""
from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bertcore import settings
from bertcore.message import Message

ROOTS_ENV = settings.known("BERTCORE_OPEN_ROOTS")
ANY, ROOTS, NONE = "any", "roots", "none"
MAX_PATH_CHARS = 1024  # a typed path longer than this is refused before it reaches the file system
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")  # never opened, even below a root such as "/"
PROXY_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")
MODEL_FILE = "config.json"  # every folder that can be opened holds one (bertcore checkpoint or transformers)

# The one answer of the roots mode to any path that does not open (explorer.session.state.open_folder translates it).
REFUSED = Message("That folder cannot be opened on this server. Only the model folders the server offers open here; "
           "your own runs open from the run list above.")
IN_WORKSPACES = Message("Runs of the browser workspaces do not open by path: open yours from the run list above, or ask "
                 "for a read-only link to someone else's.")


@dataclass(frozen=True)
class Policy:
    mode: str  # ANY | ROOTS | NONE
    roots: tuple[Path, ...] = ()  # resolved, in the ROOTS mode

    @property
    def shows_box(self) -> bool:
        """Whether the sidebar offers "Open a local folder" at all."""
        return self.mode != NONE

    @property
    def restricted(self) -> bool:
        """Whether refusals are the one message that tells nothing (every mode but a personal machine's)."""
        return self.mode != ANY


def is_loopback(address: str | None) -> bool:
    """Whether a Streamlit ``server.address`` accepts connections from this machine only.

    None or "" (Streamlit's default) binds every interface: not loopback; nor is a unix socket (a proxy is
    in front of it) or a host name other than ``localhost`` (no name is looked up)."""
    if not address:
        return False
    a = address.strip().strip("[]").lower()
    if a in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(a).is_loopback
    except ValueError:
        return False


def proxied(headers: Mapping[str, str] | None) -> bool:
    """Whether a request came through a reverse proxy (nginx sets X-Forwarded-For: deploy/nginx-class.conf)."""
    if not headers:
        return False
    names = {str(k).lower() for k in headers}
    return any(h in names for h in PROXY_HEADERS)


def policy(address: str | None, env: Mapping[str, str] | None = None, via_proxy: bool = False) -> Policy:
    """The session's folder policy (module docstring): BERTCORE_OPEN_ROOTS when set, else the address decides.
    ``env``: the environment to read it from (None: the process's own; bertcore.settings parses the folders)."""
    roots = settings.paths(ROOTS_ENV, env)
    if roots is not None:
        return Policy(ROOTS, roots) if roots else Policy(NONE)
    if is_loopback(address) and not via_proxy:
        return Policy(ANY)
    return Policy(NONE)


def inside(path: Path, folders: Iterable[Path]) -> bool:
    """Whether ``path`` (resolved) is one of ``folders`` or below one of them."""
    return any(path == f or f in path.parents for f in folders)


def _plain_text(raw: object) -> str | None:
    """The typed path when it is a reasonable absolute path text, else None (no file system call)."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if not text or len(text) > MAX_PATH_CHARS or not text.startswith("/"):
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in text):  # NUL, newlines, escapes
        return None
    if ".." in Path(text).parts:  # never walk up, even inside a root
        return None
    return text


def allowed(raw: object, roots: Iterable[Path], forbidden: Iterable[Path] = ()) -> Path | None:
    """The resolved folder to open for the typed ``raw`` in the roots mode, or None for any refusal.

    The folder is resolved (symlinks followed) before it is compared, so a link inside a root that points out of
    it is refused; it must hold config.json. Nothing is created, written or followed beyond ``realpath``."""
    text = _plain_text(raw)
    if text is None:
        return None
    try:
        p = Path(os.path.realpath(text))
    except (OSError, ValueError, RuntimeError):
        return None
    system = [Path(s) for s in SYSTEM_FOLDERS]
    if not inside(p, list(roots)) or inside(p, system) or inside(p, [Path(os.path.realpath(f)) for f in forbidden]):
        return None
    try:
        if not p.is_dir() or not (p / MODEL_FILE).is_file():
            return None
    except (OSError, ValueError):
        return None
    return p


def in_forbidden(raw: str, forbidden: Iterable[Path]) -> bool:
    """Whether the typed path (resolved, ~ expanded) lies in one of ``forbidden`` (the personal machine's check)."""
    try:
        p = Path(os.path.realpath(os.path.expanduser(raw.strip())))
    except (OSError, ValueError, RuntimeError):
        return False
    return inside(p, [Path(os.path.realpath(f)) for f in forbidden])
