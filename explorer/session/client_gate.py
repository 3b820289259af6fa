"""The client gate: a flood of sessions from one address is turned away before Streamlit makes a session of it.

``explorer.session.client_limits`` caps one address's sessions, page runs, Starts and uploads inside the app, so a
refused client gets a message that says which cap and how long to wait. But each of those answers is a new
Streamlit session and a page script started on the server; a script that opens hundreds of sessions and reloads
in a loop (a flood of connections) keeps the server busy with sessions that are only refused. This gate sits in front of
Streamlit as ASGI middleware (``serve.py``: ``st.App("app.py", middleware=[ClientGate])``) and looks at each new
connection of the app's websocket (``/_stcore/stream``, one per browser tab or reload) before Streamlit sees it,
and at each load of the app's HTML page (``GET /``, ``GET /train``: the request before that websocket):

==========================  ================================================================  =======
what                        per client address                                                default
==========================  ================================================================  =======
new connections a minute    ``BERTCORE_CLIENT_CONNECTS_PER_MINUTE``: the rate of a token bucket     60
a burst at once             ``BERTCORE_CLIENT_CONNECT_BURST``: the bucket's size                    10
open connections            ``BERTCORE_CLIENT_CONNECTIONS``: websockets open (or waiting) at once   100
page loads a minute         ``BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE``: a token bucket of its own    60
==========================  ================================================================  =======

A page load is served through Streamlit's HTTP stack (its session-cookie, path and gzip middleware and a file read:
about as much of the event loop as the websocket's handshake), so a flood's page loads cost the server as much as
its sessions (docs/BENCH-HISTORY.md, "The client flood beside the class of 100"). One over the bucket gets HTTP
429 with a ``Retry-After`` instead, from the gate, after the same ``refusal_delay``. The static files (``/static/``),
``/_stcore/`` and the media are not counted: a browser caches the first and the app itself asks for the others.

A connection whose turn has not come waits for it (up to ``MAX_WAIT`` = 10 s, a sleeping coroutine: no thread, no
session yet), so a person who opens a dozen tabs at once gets all of them, a little later; a flood's sessions reach
Streamlit at most at the bucket's rate instead of all at once. One whose turn is further away, or over the
open-connections cap, is refused after ``refusal_delay`` seconds (by default 3 s, doubling with every further burst of
refusals of that address in a minute, up to 60 s) with close code 1008 before it is accepted,
which a browser sees as an HTTP 403 on the upgrade. The app's own caps (30 new sessions a minute) still apply to
what the gate lets through and answer with their message. 0 turns the rate or the open cap off. The address is the
one ``client_limits.client_key`` counts (a proxy's ``X-Forwarded-For`` only when uvicorn trusts that proxy), and
connections from the server machine itself are not gated unless ``BERTCORE_CLIENT_CAP_LOCAL=1``.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict

from bertcore import settings
from explorer import i18n
from explorer.i18n import mark, tr
from explorer.session.client_limits import LOCAL, SlidingWindow, cap_local, client_key, escalated_delay, refill

STREAM_PATH = "/_stcore/stream"
MAX_WAIT = 10.0  # a connection waits at most this long for its turn; one that would wait longer is refused
MAX_KEYS = 10_000  # addresses remembered; the least recently seen is forgotten first
POLICY_VIOLATION = 1008  # the websocket close code for "refused by policy"
_LOCK = threading.Lock()
_OPEN: dict[str, int] = {}  # address -> websockets open now (or waiting for their turn)
_BUCKETS: OrderedDict[str, list[float]] = OrderedDict()  # address -> [tokens, monotonic time of that count]
_PAGE_BUCKETS: OrderedDict[str, list[float]] = OrderedDict()  # the same, for the HTML page loads
REFUSALS = SlidingWindow()  # the refused connections of each address in the last minute (the delay grows with them)
refused = {"connects": 0, "open": 0, "pages": 0}  # how many connections or page loads each cap turned away
NOT_PAGES = ("/_stcore/", "/static/", "/app/static/", "/media/", "/component/")
PAGE_REFUSED = mark("Too many page loads from your network address: at most {cap} a minute (set by {env}). "
                    "Reload in {seconds} s; your workspace and runs are kept.")


def connects_cap() -> int:
    return settings.whole("BERTCORE_CLIENT_CONNECTS_PER_MINUTE")


def connect_burst() -> int:
    return settings.whole("BERTCORE_CLIENT_CONNECT_BURST")


def page_loads_cap() -> int:
    return settings.whole("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE")


def is_page_load(scope) -> bool:
    """A GET of the app's HTML page: any path but the static files, ``/_stcore/``, media and components, whose last
    part has no dot (``/``, ``/train``; ``/favicon.png`` is a file)."""
    path = str(scope.get("path", ""))
    if scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD") or path.startswith(NOT_PAGES):
        return False
    return "." not in path.rsplit("/", 1)[-1]


def connections_cap() -> int:
    return settings.whole("BERTCORE_CLIENT_CONNECTIONS")


def open_connections(key: str) -> int:
    with _LOCK:
        return _OPEN.get(key, 0)


def clear() -> None:
    with _LOCK:
        _OPEN.clear()
        _BUCKETS.clear()
        _PAGE_BUCKETS.clear()
    REFUSALS.clear()


def refusal_delay(key: str) -> float:
    """Seconds before a refused connection of ``key`` is told: ``refused_delay()`` for its first ``connect_burst``
    refusals in a minute, then doubling with each further burst of them, up to a minute (client_limits'
    ``escalated_delay``). A person refused once waits the base delay; a flood that asks again at once waits ever
    longer, so its retries cost the server less and less."""
    REFUSALS.allow(key, 1_000_000)
    return escalated_delay(1 + (REFUSALS.count(key) - 1) // connect_burst())


def _tokens(buckets: OrderedDict, key: str, now: float, rate: float) -> float:
    """``key``'s tokens in ``buckets`` at ``now`` (``connect_burst`` when it has none yet), refilled at ``rate`` a
    second since they were last counted, at most ``connect_burst``."""
    burst = float(connect_burst())
    tokens, then = buckets.get(key, [burst, now])
    return refill(tokens, then, now, rate, burst)


def _turn(key: str, now: float, buckets: OrderedDict, per_minute: int) -> float | None:
    """Take ``key``'s next turn from its token bucket in ``buckets`` (``connect_burst`` tokens, refilled at
    ``per_minute``): the seconds until that turn (0: now), or None when it would be more than MAX_WAIT away."""
    rate = per_minute / 60.0
    if rate <= 0:
        return 0.0
    tokens = _tokens(buckets, key, now, rate)
    buckets.pop(key, None)  # re-inserted last: the most recently seen
    wait = 0.0 if tokens >= 1 else (1 - tokens) / rate
    if wait > MAX_WAIT:
        buckets[key] = [tokens, now]
        return None
    buckets[key] = [tokens - 1, now]  # below zero: turns already promised to connections that wait
    while len(buckets) > MAX_KEYS:
        buckets.popitem(last=False)
    return wait


def page_wait(key: str, now: float | None = None) -> float:
    """Seconds until ``key``'s next page-load turn, taking none (what a refused load is told to wait)."""
    now = time.monotonic() if now is None else now
    rate = page_loads_cap() / 60.0
    if rate <= 0:
        return 0.0
    with _LOCK:
        tokens = _tokens(_PAGE_BUCKETS, key, now, rate)
    return 0.0 if tokens >= 1 else (1 - tokens) / rate


def admit_page(key: str, now: float | None = None) -> float | None:
    """A page load of ``key``: the seconds it waits for its turn (0.0: none), or None when it is refused."""
    now = time.monotonic() if now is None else now
    with _LOCK:
        return _turn(key, now, _PAGE_BUCKETS, page_loads_cap())


def admit(key: str, now: float | None = None) -> float | str:
    """A new connection of ``key``: the seconds it waits for its turn (0.0: none; from then on it is open until
    ``closed(key)``), or the cap it is over ("open" or "connects") when it is refused."""
    now = time.monotonic() if now is None else now
    with _LOCK:
        cap = connections_cap()
        if cap and _OPEN.get(key, 0) >= cap:
            return "open"
        wait = _turn(key, now, _BUCKETS, connects_cap())
        if wait is None:
            return "connects"
        _OPEN[key] = _OPEN.get(key, 0) + 1
    return wait


def closed(key: str) -> None:
    with _LOCK:
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
        stream = scope.get("type") == "websocket" and str(scope.get("path", "")).endswith(STREAM_PATH)
        if not stream and not is_page_load(scope):
            return await self.app(scope, receive, send)
        host = (scope.get("client") or (None, None))[0]
        key = client_key(None if host in ("127.0.0.1", "::1") else host)
        if key == LOCAL and not cap_local():
            return await self.app(scope, receive, send)
        if not stream:
            return await self._page_load(key, scope, receive, send)
        got = admit(key)
        if isinstance(got, float):
            try:
                if got > 0:  # its turn comes later: a sleeping coroutine holds it, no thread, no session yet
                    await asyncio.sleep(got)
                return await self.app(scope, receive, send)
            finally:
                closed(key)
        refused[got] += 1
        delay = refusal_delay(key)
        message = await receive()  # websocket.connect
        if message.get("type") == "websocket.connect":
            await asyncio.sleep(delay)
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})

    async def _page_load(self, key, scope, receive, send):
        wait = admit_page(key)
        if wait is not None:
            if wait > 0:
                await asyncio.sleep(wait)
            return await self.app(scope, receive, send)
        refused["pages"] += 1
        delay = refusal_delay(key)
        await asyncio.sleep(delay)
        lang = "zh" if b"lang=zh" in (scope.get("query_string") or b"") else "en"
        seconds = max(1, math.ceil(page_wait(key)))
        with i18n.using(lang):
            text = tr(PAGE_REFUSED, cap=page_loads_cap(), env=settings.known("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE"),
                      seconds=seconds)
        body = text.encode("utf-8")
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(seconds).encode())]})
        await send({"type": "http.response.body", "body": body if scope.get("method") == "GET" else b""})
