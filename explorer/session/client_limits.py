"""Caps per client address, so that one client cannot starve a class.

Four things are counted per client address over a sliding window of one minute, each with its own cap (an
environment variable of the server; 0 turns that cap off):

=========  ==========================================  =======  =============================================
action     what is counted                              default  where
=========  ==========================================  =======  =============================================
session    a new browser session (a tab, a reload)         30   app.py, the session's first run
run        a page run (a click, a page switch, a reload)   60   app.py, every full run (fragment reruns: not)
start      a training started (Train, Compare, resume)      3   ``explorer.launch.training_run.TrainingRun.start``
upload     a checkpoint zip extracted and loaded           10   ``explorer.session.uploads.load_checkpoint_zip``
=========  ==========================================  =======  =============================================

Each cap also has a pace: at most ``BERTCORE_CLIENT_BURST`` (default 10) of one action at once, then the cap's own
rate (60 page runs a minute: one a second; a token bucket beside the window). Without it a client in a tight loop
spends its whole minute in one burst and the students' pages queue behind it (docs/BENCH-HISTORY.md, "The client
flood beside the class of 100").

Only what was allowed is counted, so a client that stops is let in again as its oldest counted event leaves
the window, and a Start that the server refused (``ServerBusy``) is given back (``refund``).

The client address is Streamlit's ``st.context.ip_address``: the websocket's peer as uvicorn (Streamlit 1.67's
server) saw it. uvicorn replaces the peer by the last address of ``X-Forwarded-For`` that is not itself a trusted
proxy only when the connection comes from a trusted proxy (uvicorn's ``FORWARDED_ALLOW_IPS``, default
``127.0.0.1,::1``: an nginx on the same machine, deploy/nginx-class.conf), so a client that talks to the server
directly cannot choose its address with a header; ``X-Real-IP`` is not read. Streamlit gives None for 127.0.0.1
and ::1: the server machine itself (a personal machine, or a proxy that forwards no address), counted as one
client named ``local`` and not capped unless ``BERTCORE_CLIENT_CAP_LOCAL=1``. IPv6 addresses are counted per /64
(one host usually holds a whole /64). docs/LIMITS.md ("One client cannot starve the class") has the settings.

The windows are module-level, one per action, shared by every session of the server process; each takes a lock
for its few dictionary operations and holds at most ``MAX_CLIENTS`` addresses, each with at most its cap of
timestamps.
"""
from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from bertcore.errors import BertcoreError
from bertcore import settings
from bertcore.message import reason
from explorer.i18n import mark, tr

WINDOW_SECONDS = 60.0
MAX_CLIENTS = 10_000  # addresses remembered per action; the least recently counted one is forgotten first
LOCAL = "local"  # the key of connections from the server machine itself (st.context.ip_address is None)
_ADMITTED = "bx_client_admitted"  # st.session_state: this session was counted as a new session
_REFUSALS = "bx_client_refusals"  # st.session_state: this session's refused runs in a row (the delay doubles)
MAX_REFUSED_DELAY = 60.0  # the longest a refused run waits: one window, after which its count may have dropped
sleep = time.sleep  # how a refused page run waits (refused_delay); a test puts a recorder here


class SlidingWindow:
    """The times of each key's counted events in the last ``window`` seconds, and each key's pace; thread-safe,
    memory bounded.

    ``allow(key, cap, burst)`` counts one event and returns 0.0 when the key has fewer than ``cap`` in the window
    and, with ``burst`` > 0, a turn in its token bucket (``burst`` tokens, refilled at ``cap`` per window: events
    after a burst come at the cap's own pace, not all at once); otherwise it counts nothing and returns the seconds
    until both allow one. At most ``max_keys`` keys are kept: a new key first drops the keys whose events have all
    left the window, then the least recently counted key."""

    def __init__(self, window: float = WINDOW_SECONDS, max_keys: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic):
        self.window = float(window)
        self.max_keys = int(max_keys)
        self.clock = clock
        self._lock = threading.Lock()
        self._events: OrderedDict[str, deque] = OrderedDict()  # least recently counted key first
        self._paces: dict[str, list[float]] = {}  # key -> [tokens, the time they were counted]

    def allow(self, key: str, cap: int, burst: int = 0, now: float | None = None) -> float:
        if cap <= 0:
            return 0.0
        now = self.clock() if now is None else now
        with self._lock:
            times = self._events.get(key)
            if times is not None:
                while times and times[0] <= now - self.window:
                    times.popleft()
                if len(times) >= cap:  # the cap may have been lowered: the event that must leave is len - cap
                    return max(1e-3, times[len(times) - cap] + self.window - now)
            tokens = self._tokens(key, cap, burst, now)
            if tokens < 1:
                return max(1e-3, (1 - tokens) * self.window / cap)
            if times is None:
                self._make_room(now)
                times = self._events[key] = deque()
            times.append(now)
            self._events.move_to_end(key)
            if burst > 0:
                self._paces[key] = [tokens - 1, now]
            return 0.0

    def _tokens(self, key: str, cap: int, burst: int, now: float) -> float:
        """``key``'s tokens at ``now``: ``burst`` when it has none counted, refilled at ``cap`` per window since
        (a burst of 0: no pace, always a token)."""
        if burst <= 0:
            return 1.0
        tokens, then = self._paces.get(key, (float(burst), now))
        return refill(tokens, then, now, cap / self.window, burst)

    def refund(self, key: str) -> None:
        """Take back the latest counted event of ``key`` (an action that did not happen after all)."""
        with self._lock:
            times = self._events.get(key)
            if times:
                times.pop()
                pace = self._paces.get(key)
                if pace is not None:
                    pace[0] += 1

    def count(self, key: str, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        with self._lock:
            return sum(1 for t in self._events.get(key, ()) if t > now - self.window)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
            self._paces.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def _make_room(self, now: float) -> None:
        if len(self._events) < self.max_keys:
            return
        # the keys are in the order of their latest event: drop those whose events have all left the window
        while self._events:
            key, times = next(iter(self._events.items()))
            if times and times[-1] > now - self.window:
                break
            self._forget(key)
        while len(self._events) >= self.max_keys:  # still full: forget the least recently counted
            self._forget(next(iter(self._events)))

    def _forget(self, key: str) -> None:
        del self._events[key]
        self._paces.pop(key, None)


def refill(tokens: float, then: float, now: float, rate: float, burst: float) -> float:
    """A token bucket's tokens at ``now``: ``tokens`` when last counted at ``then``, refilled at ``rate`` a second
    since, at most ``burst`` (the pace here and the client gate's turns, explorer/session/client_gate.py)."""
    return min(float(burst), tokens + (now - then) * rate)


@dataclass(frozen=True)
class Cap:
    env: str  # its variable in bertcore.settings.SETTINGS, which holds its default
    message: str  # {cap}, {env} and {seconds} are filled in


CAPS = {
    "session": Cap(settings.known("BERTCORE_CLIENT_SESSIONS_PER_MINUTE"), mark(
                   "Too many new sessions from your network address: at most {cap} a minute (set by {env}). Close "
                   "the tabs you do not need and reload in {seconds} s; your workspace and runs are kept.")),
    "run": Cap(settings.known("BERTCORE_CLIENT_RUNS_PER_MINUTE"), mark(
               "Too many page requests from your network address: at most {cap} a minute (set by {env}). Wait "
               "{seconds} s, then click again; nothing is lost.")),
    "start": Cap(settings.known("BERTCORE_CLIENT_STARTS_PER_MINUTE"), mark(
                 "Too many trainings started from your network address: at most {cap} a minute (set by {env}). "
                 "Press Start again in {seconds} s.")),
    "upload": Cap(settings.known("BERTCORE_CLIENT_UPLOADS_PER_MINUTE"), mark(
                  "Too many uploads from your network address: at most {cap} a minute (set by {env}). Try again "
                  "in {seconds} s.")),
}
WINDOWS = {action: SlidingWindow() for action in CAPS}  # shared by every session of this server process


class ClientLimited(BertcoreError):
    """An action refused because its client reached a cap; the message (in the session's language) says which
    cap, the environment variable that sets it and how long to wait."""


def cap(action: str) -> int:
    """The cap of ``action`` per client and minute (its environment variable; 0 = no cap). ConfigError when the
    variable is not a whole number."""
    return settings.whole(CAPS[action].env)


def burst() -> int:
    """The most of one action a client may do at once (env BERTCORE_CLIENT_BURST, default 10; 0: no pace). After
    a burst the next ones come at the cap's own pace (60 page runs a minute: one a second), so a client in a tight
    loop spreads its minute's cap over the minute instead of spending it in the first seconds, all at once, beside
    everyone else's pages."""
    return settings.whole("BERTCORE_CLIENT_BURST")


def cap_local() -> bool:
    """Whether connections from the server machine itself are capped too (env BERTCORE_CLIENT_CAP_LOCAL, default
    0: a personal machine's own user, or a proxy that forwards no address, is never refused)."""
    return settings.flag("BERTCORE_CLIENT_CAP_LOCAL")


def refused_delay() -> float:
    """Seconds a refused page run waits before it answers (env BERTCORE_CLIENT_REFUSED_DELAY, default 3, 0..30).
    A session's runs follow one another, so a script that reloads or clicks in a tight loop gets at most one
    answer per delay from each of its sessions: its refusals cost the server a sleeping thread, not a core."""
    return settings.number("BERTCORE_CLIENT_REFUSED_DELAY")


def escalated_delay(refusals: int, base: float | None = None) -> float:
    """The wait before the ``refusals``-th refused run in a row of one session answers: the base delay
    (``refused_delay``), doubled at each further refusal, at most MAX_REFUSED_DELAY. A person over a cap gets the
    message after the base delay; a script that asks again at once gets one answer a minute from each of its
    sessions after six refusals, so a session that only asks costs the server ever less."""
    base = refused_delay() if base is None else base
    if refusals <= 0 or base <= 0:
        return 0.0
    return min(MAX_REFUSED_DELAY, base * 2.0 ** min(refusals - 1, 16))


def client_key(address: str | None) -> str:
    """The key an address is counted under: ``local`` for None or empty, an IPv4 address as written (an
    IPv4-mapped IPv6 address as its IPv4), an IPv6 address as its /64 network, anything else (not an IP address)
    as its first 64 characters."""
    if not address:
        return LOCAL
    try:
        ip = ipaddress.ip_address(address.strip().split("%", 1)[0])
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def client_address() -> str | None:
    """This session's client address (``st.context.ip_address``; None on the server machine itself and outside a
    session). streamlit is imported here, at the call: ``explorer.launch.training_run`` and ``explorer.session.uploads``, which
    use no streamlit themselves, count their actions through this module."""
    import streamlit as st

    try:
        address = st.context.ip_address
    except Exception:  # noqa: BLE001 - no script run context (a script, a thread): the machine itself
        return None
    return address if isinstance(address, str) else None  # AppTest's stand-in runtime gives a mock object


def message(action: str, seconds: float) -> str:
    c = CAPS[action]
    return tr(c.message, cap=cap(action), env=c.env, seconds=max(1, math.ceil(seconds)))


def refusal(action: str, address: str | None = None) -> str | None:
    """Count one ``action`` of this session's client (or of ``address``): None when it is allowed, else the
    message that says which cap was reached and how long to wait."""
    key = client_key(address if address is not None else client_address())
    if key == LOCAL and not cap_local():
        return None
    wait = WINDOWS[action].allow(key, cap(action), burst())
    return message(action, wait) if wait else None


def charge(action: str) -> None:
    """``refusal`` as an exception: ClientLimited with its message."""
    text = refusal(action)
    if text:
        raise ClientLimited(text)


def refund(action: str, address: str | None = None) -> None:
    """Give back the latest counted ``action`` of this session's client (it did not happen after all)."""
    key = client_key(address if address is not None else client_address())
    if key != LOCAL or cap_local():
        WINDOWS[action].refund(key)


def admit_run() -> str | None:
    """app.py, at every full run: the session's first admitted run counts as a new session, and every run as a
    page run. None when the run may go on; else the message to show instead of the page (a refused session asks
    again at its next run), given after ``escalated_delay`` seconds (doubling with each refusal in a row). A server setting that is not a number gives its
    own message."""
    import streamlit as st

    try:
        text = None
        if not st.session_state.get(_ADMITTED):
            text = refusal("session")
            if not text:
                st.session_state[_ADMITTED] = True
        text = text or refusal("run")
        if text:
            n = int(st.session_state.get(_REFUSALS, 0)) + 1
            st.session_state[_REFUSALS] = n
            sleep(escalated_delay(n))
        else:
            st.session_state[_REFUSALS] = 0
        return text
    except BertcoreError as e:
        return tr(reason(e))
