"""The client gate: a flood of sessions from one address is turned away before Streamlit makes a session of it.

``explorer.session.client_limits`` caps one address's sessions, page runs, Starts and uploads inside the app, so a
refused client gets a message that says which cap and how long to wait. But each of those answers is a new
Streamlit session and a page script started on the server; a script that opens hundreds of sessions and reloads
in a loop (issue 45's flood) keeps the server busy with sessions that are only refused. This gate sits in front of
Streamlit as ASGI middleware (``serve.py``: ``st.App("app.py", middleware=[ClientGate])``) and looks at each new
connection of the app's websocket (``/_stcore/stream``, one per browser tab or reload) before Streamlit sees it:

==================  =========================================================================  =======
what                cap per client address                                                     default
==================  =========================================================================  =======
connects            new websocket connections in a sliding minute                               120
                    (``BERTCORE_CLIENT_CONNECTS_PER_MINUTE``)
open connections    websockets open at once (``BERTCORE_CLIENT_CONNECTIONS``)                    100
==================  =========================================================================  =======

Both defaults sit well above the app's own session cap (30 a minute), so a person, or a class behind one
address, meets the app's message first; only a script gets this far. A connection over a cap is refused after
``refused_delay()`` seconds (a sleeping coroutine: it costs no thread and no core) with close code 1008 before
it is accepted, which a browser sees as an HTTP 403 on the upgrade. 0 turns a cap off. The address is the one
``client_limits.client_key`` counts (a proxy's ``X-Forwarded-For`` only when uvicorn trusts that proxy), and
connections from the server machine itself are not capped unless ``BERTCORE_CLIENT_CAP_LOCAL=1``.
"""
from __future__ import annotations

import asyncio
import threading

from bertcore.settings import env_number
from explorer.session.client_limits import LOCAL, SlidingWindow, cap_local, client_key, refused_delay

STREAM_PATH = "/_stcore/stream"
CONNECTS = SlidingWindow()  # new connections per address and minute, shared by the whole server process
_OPEN: dict[str, int] = {}  # address -> websockets open now
_OPEN_LOCK = threading.Lock()
POLICY_VIOLATION = 1008  # the websocket close code for "refused by policy"
refused = {"connects": 0, "open": 0}  # how many connections each cap turned away (a bench reads it)


def connects_cap() -> int:
    return env_number("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", 120, minimum=0, integer=True)


def connections_cap() -> int:
    return env_number("BERTCORE_CLIENT_CONNECTIONS", 100, minimum=0, integer=True)


def open_connections(key: str) -> int:
    with _OPEN_LOCK:
        return _OPEN.get(key, 0)


def admit(key: str) -> str | None:
    """Count a new connection of ``key``: None when it may go on (then it is open until ``closed(key)``), else
    the cap it is over ("connects" or "open")."""
    with _OPEN_LOCK:
        cap = connections_cap()
        if cap and _OPEN.get(key, 0) >= cap:
            return "open"
        if CONNECTS.allow(key, connects_cap()) > 0:
            return "connects"
        _OPEN[key] = _OPEN.get(key, 0) + 1
    return None


def closed(key: str) -> None:
    with _OPEN_LOCK:
        n = _OPEN.get(key, 0) - 1
        if n > 0:
            _OPEN[key] = n
        else:
            _OPEN.pop(key, None)


class ClientGate:
    """ASGI middleware: the app's websocket connections pass ``admit``; everything else goes straight through."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "websocket" or not str(scope.get("path", "")).endswith(STREAM_PATH):
            return await self.app(scope, receive, send)
        host = (scope.get("client") or (None, None))[0]
        key = client_key(None if host in ("127.0.0.1", "::1") else host)
        if key == LOCAL and not cap_local():
            return await self.app(scope, receive, send)
        over = admit(key)
        if over is None:
            try:
                return await self.app(scope, receive, send)
            finally:
                closed(key)
        refused[over] += 1
        message = await receive()  # websocket.connect
        if message.get("type") == "websocket.connect":
            await asyncio.sleep(refused_delay())
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
