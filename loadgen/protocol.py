"""One simulated browser tab that speaks Streamlit's websocket protocol on ``/_stcore/stream``.

What the frontend does, and so what ``StreamlitTab`` does (learned from streamlit 1.67's
``web/server/starlette/starlette_websocket.py``, ``runtime/app_session.py`` and the frontend bundle):

* Load the page's HTML (``GET /path``; a sticky proxy may set its cookie there), then open the websocket
  with the subprotocol ``streamlit`` and those cookies; the server creates a session and waits.
* Send a ``BackMsg.rerun_script`` (a ``ClientState``). The first one names the page by its URL path in
  ``page_name`` (``""`` is the default page) with an empty ``page_script_hash``; a click in the page menu
  sends the target page's ``page_script_hash``; a widget change sends the current page's hash and the
  ``widget_states`` (a button press is a ``trigger_value``).
* The server answers with ``ForwardMsg`` s: ``new_session`` at the start of every run (its
  ``metadata.run`` names the run, and fragment ids for a fragment run), ``navigation`` with the app's
  pages and their hashes, ``delta`` s that add elements at ``metadata.delta_path`` (an exception is
  ``delta.new_element.exception``), ``auto_rerun`` for a fragment with ``run_every`` and finally
  ``script_finished``. ``FINISHED_EARLY_FOR_RERUN`` means another run follows.
* A fragment with ``run_every`` is rerun by the client: a ``rerun_script`` with its ``fragment_id`` and
  ``is_auto_rerun`` every ``interval`` seconds until the next full run or a ``stop_auto_rerun``.
* Every delta drawn inside a fragment carries its ``fragment_id``. A widget inside a fragment reruns only that
  fragment: the frontend sends the ``rerun_script`` with the fragment's id, the run's ``new_session`` names it in
  ``metadata.run.fragment_ids``, the fragment redraws its part of the page in place (elements it did not draw
  again are dropped) and the run ends with ``FINISHED_FRAGMENT_RUN_SUCCESSFULLY``.

A request's time is measured from sending its ``rerun_script`` to the ``script_finished`` of the full run (or
the fragment run) it started: that is when a browser has received everything it draws.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect

from loadgen import HOST

_INPUT_KINDS = ("text_area", "text_input")
_FRAGMENT_WAIT = 5.0  # seconds: at most one auto-rerun in flight; give up waiting for its finish after this


async def http_get(port: int, path: str, timeout: float = 10.0, cookie: str = "", source: str = "",
                   headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    """A minimal HTTP/1.1 GET to 127.0.0.1: (status, headers, body). Reads to the end (Connection: close).
    ``source``: the local address to connect from (another loopback address, e.g. 127.0.0.2); ``headers``: more
    request headers (e.g. X-Forwarded-For)."""
    sent = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())

    async def go():
        reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0) if source else None)
        try:
            extra = (f"Cookie: {cookie}\r\n" if cookie else "") + sent
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{extra}Connection: close\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read(-1)
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
        return int(lines[0].split()[1]), headers, body
    return await asyncio.wait_for(go(), timeout)


@dataclass
class RunResult:
    """The outcome of one request: seconds to the run's finish, and what went wrong in it."""

    seconds: float
    ok: bool
    error: str = ""
    exceptions: list[str] = field(default_factory=list)
    nbytes: int = 0


class StreamlitTab:
    """A browser tab without a browser: one websocket session, one request at a time.

    ``on_payload(bytes)`` sees every raw forward message (for leak checks); ``on_element(kind, element)``
    sees every element as it arrives (for progress bars). ``max_seconds`` bounds the tab's whole life:
    after it every wait fails and the auto-rerun loop stops. ``source`` is the local address the tab connects
    from (default: the system's choice, 127.0.0.1) and ``headers`` go with its page load and websocket handshake.
    """

    def __init__(self, port: int, *, timeout: float = 60.0, max_seconds: float = 3600.0,
                 on_payload: Callable[[bytes], None] | None = None,
                 on_element: Callable[[str, object], None] | None = None,
                 source: str = "", headers: dict[str, str] | None = None):
        self.url = f"ws://{HOST}:{int(port)}/_stcore/stream"
        self.port = int(port)
        self.source = source
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.end_by = time.monotonic() + float(max_seconds)
        self.on_payload = on_payload
        self.on_element = on_element
        self.pages: dict[str, str] = {}  # url path ("" = the default page) -> page script hash
        self.page_hash = ""  # the page shown now
        self.elements: dict[tuple[int, ...], object] = {}  # delta path -> Element, latest finished full run
        self._building: dict[tuple[int, ...], object] = {}  # the same for the full run in progress
        self.values: dict[str, WidgetState] = {}  # widget id -> the value this tab last gave it
        self.bytes_in = 0
        self.closed_reason = ""
        self._ws = None
        self._tasks: list[asyncio.Task] = []
        self._auto: dict[str, list[float]] = {}  # fragment id -> [interval, next due time]
        self._frag_sent = 0.0
        self._waiter: asyncio.Future | None = None
        self._run_id = ""
        self._full_started = False
        self._run_exceptions: list[str] = []
        self._run_bytes = 0
        self._fragment_of: dict[tuple[int, ...], str] = {}  # delta path -> the fragment that drew it
        self._want_fragment = ""  # the fragment the request in flight reruns ("" = a full run)
        self._fragment_run = ""  # the run id of that fragment run, once its new_session came
        self._fragment_drawn: set[tuple[int, ...]] = set()

    # ------------------------------------------------------------------ connection
    async def open(self, path: str = "") -> RunResult:
        """Connect and load the page at URL path ``path`` (``""`` is the default page), as a page load does."""
        t0 = time.perf_counter()
        try:
            # the page's HTML first, as a browser loads it; keep its cookies (a sticky proxy may set one)
            status, headers, _ = await http_get(self.port, "/" + path, self.timeout, source=self.source,
                                                headers=self.headers)
            if status != 200:
                return RunResult(time.perf_counter() - t0, False, f"GET /{path} answered HTTP {status}")
            cookies = "; ".join(v.split(";", 1)[0] for k, v in headers if k.lower() == "set-cookie")
            extra = {**self.headers, **({"Cookie": cookies} if cookies else {})}
            where = {"local_addr": (self.source, 0)} if self.source else {}
            self._ws = await asyncio.wait_for(
                # no client pings: a browser sends none (the server pings, and pongs are automatic)
                connect(self.url, subprotocols=["streamlit"], max_size=None, open_timeout=self.timeout,
                        ping_interval=None, additional_headers=extra or None, **where),
                self.timeout)
        except Exception as e:  # noqa: BLE001 - reported as an error of this request
            return RunResult(time.perf_counter() - t0, False, f"connect failed: {type(e).__name__}: {e}")
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._auto_reruns())]
        return await self._request(page_name=path, t0=t0)

    async def close(self) -> None:
        """Close the websocket (as closing the tab does) and stop this tab's tasks."""
        for t in self._tasks:
            t.cancel()
        if self._ws is not None:
            try:
                await asyncio.wait_for(self._ws.close(), 5)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001, S110 - finished either way
                pass
        self._tasks = []

    # ------------------------------------------------------------------ what a user does
    async def reload(self, path: str = "") -> RunResult:
        """Ask for the page at URL path ``path`` again in this session, as the first request of a page load does
        (without reconnecting): what a tab whose page shows no menu can still do."""
        return await self._request(page_name=path)

    async def goto(self, path: str) -> RunResult:
        """Click the page with URL path ``path`` in the page menu."""
        page_hash = self.pages.get(path)
        if page_hash is None:
            return RunResult(0.0, False, f"no page with URL path {path!r} (pages: {sorted(self.pages)})")
        sidebar = [s for wid, s in self.values.items() if self._where(wid) == 1]
        return await self._request(page_hash=page_hash, states=sidebar)

    async def interact(self, *, texts: dict[str, str] | None = None, sliders: dict[str, float] | None = None,
                       click: str | None = None) -> RunResult:
        """Type into text widgets and move sliders (by label), optionally press the button ``click``; one rerun."""
        missing = []
        for label, value in (texts or {}).items():
            wid = self.widget_id(_INPUT_KINDS, label)
            if wid is None:
                missing.append(label)
            else:
                self.values[wid] = WidgetState(id=wid, string_value=value)
        for label, value in (sliders or {}).items():
            wid = self.widget_id(("slider",), label)
            if wid is None:
                missing.append(label)
            else:
                state = WidgetState(id=wid)
                state.double_array_value.data.append(float(value))
                self.values[wid] = state
        trigger = []
        if click is not None:
            wid = self.widget_id(("button",), click)
            if wid is None:
                missing.append(click)
            else:
                trigger = [WidgetState(id=wid, trigger_value=True)]
        if missing:
            page = next((p for p, h in self.pages.items() if h == self.page_hash), self.page_hash)
            return RunResult(0.0, False, f"widget(s) not on the page /{page} ({len(self.elements)} elements): "
                                         f"{', '.join(missing)}")
        # widgets drawn inside one fragment rerun only that fragment, as the frontend does
        touched = {self._widget_fragment(w.id) for w in trigger} | {
            self._widget_fragment(self.widget_id(_INPUT_KINDS, lab)) for lab in (texts or {})} | {
            self._widget_fragment(self.widget_id(("slider",), lab)) for lab in (sliders or {})}
        fragment = touched.pop() if len(touched) == 1 else ""
        return await self._request(page_hash=self.page_hash, states=self._page_states() + trigger, fragment=fragment)

    # ------------------------------------------------------------------ what the page shows
    def widget_id(self, kinds: tuple[str, ...], label: str) -> str | None:
        """The id of the first widget of one of ``kinds`` with this label (main area before the sidebar)."""
        for path in sorted(self.elements):
            el = self.elements[path]
            kind = el.WhichOneof("type")
            if kind in kinds and getattr(el, kind).label == label:
                return getattr(el, kind).id
        return None

    def widget(self, kind: str, label: str):
        """The element proto (e.g. ``Button``) of the first widget of ``kind`` with this label, or None."""
        for path in sorted(self.elements):
            el = self.elements[path]
            if el.WhichOneof("type") == kind and getattr(el, kind).label == label:
                return getattr(el, kind)
        return None

    def shown_bytes(self) -> bytes:
        """Everything the latest full run drew, except what the user typed into text inputs."""
        out = []
        for el in self.elements.values():
            kind = el.WhichOneof("type")
            if kind not in _INPUT_KINDS:
                out.append(getattr(el, kind).SerializeToString())
        return b"\n".join(out)

    # ------------------------------------------------------------------ internals
    def _where(self, wid: str) -> int | None:
        """0 for a widget in the main area, 1 in the sidebar, None when it is not on the page."""
        for path, el in self.elements.items():
            kind = el.WhichOneof("type")
            if getattr(getattr(el, kind), "id", None) == wid:
                return path[0] if path else None
        return None

    def _widget_fragment(self, wid: str | None) -> str:
        """The fragment a widget was drawn in ("" for none)."""
        for path, el in self.elements.items():
            kind = el.WhichOneof("type")
            if getattr(getattr(el, kind), "id", None) == wid:
                return self._fragment_of.get(path, "")
        return ""

    def _page_states(self) -> list[WidgetState]:
        present = {getattr(getattr(el, el.WhichOneof("type")), "id", None) for el in self.elements.values()}
        return [s for wid, s in self.values.items() if wid in present]

    def _client_state(self, msg: BackMsg, *, page_hash: str, page_name: str, states: list) -> None:
        cs = msg.rerun_script
        cs.query_string = ""
        cs.page_script_hash = page_hash
        cs.page_name = page_name
        cs.widget_states.widgets.extend(states)
        path = page_name if not page_hash else next((p for p, h in self.pages.items() if h == page_hash), "")
        ctx = cs.context_info
        ctx.timezone, ctx.timezone_offset, ctx.locale = "UTC", 0, "en-US"
        ctx.url, ctx.is_embedded, ctx.color_scheme = f"http://{HOST}:{self.port}/{path}", False, "light"

    async def _request(self, *, page_hash: str = "", page_name: str = "", states: list | None = None,
                       t0: float | None = None, fragment: str = "") -> RunResult:
        if self._waiter is not None:
            raise RuntimeError("StreamlitTab handles one request at a time")
        t0 = time.perf_counter() if t0 is None else t0
        if self._ws is None or self.closed_reason:
            return RunResult(0.0, False, f"connection closed: {self.closed_reason or 'never opened'}")
        self._waiter = asyncio.get_running_loop().create_future()
        self._full_started, self._run_exceptions, self._run_bytes = False, [], 0
        self._want_fragment, self._fragment_run = fragment, ""
        msg = BackMsg()
        self._client_state(msg, page_hash=page_hash, page_name=page_name, states=states or [])
        if fragment:
            msg.rerun_script.fragment_id = fragment
        wait = max(0.1, min(self.timeout, self.end_by - time.monotonic()))
        try:
            await self._ws.send(msg.SerializeToString())
            err = await asyncio.wait_for(asyncio.shield(self._waiter), wait)
        except asyncio.TimeoutError:
            err = f"no script_finished within {wait:.0f} s"
        except Exception as e:  # noqa: BLE001 - the connection broke: an error of this request
            err = f"{type(e).__name__}: {e}"
        finally:
            self._waiter = None
            self._want_fragment = ""
        return RunResult(time.perf_counter() - t0, not err, err, list(self._run_exceptions), self._run_bytes)

    def _resolve(self, error: str) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(error)

    async def _read(self) -> None:
        try:
            async for data in self._ws:
                if isinstance(data, bytes):
                    self._handle(data)
            self.closed_reason = "closed by the server"
        except asyncio.CancelledError:
            self.closed_reason = "closed"
            raise
        except Exception as e:  # noqa: BLE001 - reported through the waiting request
            self.closed_reason = f"{type(e).__name__}: {e}"
        finally:
            self._resolve(f"connection closed: {self.closed_reason}")

    def _handle(self, data: bytes) -> None:
        msg = ForwardMsg()
        msg.ParseFromString(data)
        self.bytes_in += len(data)
        self._run_bytes += len(data)
        if self.on_payload is not None:
            self.on_payload(data)
        kind = msg.WhichOneof("type")
        if kind == "new_session" and not msg.metadata.run.fragment_ids:
            self._run_id = msg.metadata.run.script_run_id
            self._building = {}  # the page stays as it was until this run finishes, as in a browser
            self._auto.clear()  # the frontend drops its timers on every full run; this run re-registers them
            self._full_started = self._waiter is not None and not self._want_fragment
        elif kind == "new_session" and self._want_fragment in msg.metadata.run.fragment_ids and self._waiter:
            self._fragment_run = msg.metadata.run.script_run_id
            self._fragment_drawn = set()
        elif kind == "navigation":
            self.pages = {p.url_pathname: p.page_script_hash for p in msg.navigation.app_pages}
            self.page_hash = msg.navigation.page_script_hash
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            path = tuple(msg.metadata.delta_path)
            self._building[path] = el
            if msg.delta.fragment_id:  # a fragment redraws its part of the page in place
                self.elements[path] = el
                self._fragment_of[path] = msg.delta.fragment_id
                if msg.delta.fragment_id == self._want_fragment:
                    self._fragment_drawn.add(path)
            ek = el.WhichOneof("type")
            if ek == "exception":
                self._run_exceptions.append(f"{el.exception.type}: {el.exception.message}"[:300])
            if self.on_element is not None:
                self.on_element(ek, getattr(el, ek))
        elif kind == "auto_rerun" and msg.auto_rerun.fragment_id:
            interval = max(0.1, float(msg.auto_rerun.interval))
            self._auto[msg.auto_rerun.fragment_id] = [interval, time.monotonic() + interval]
        elif kind == "stop_auto_rerun":
            for fid in msg.stop_auto_rerun.fragment_ids:
                self._auto.pop(fid, None)
        elif kind == "page_not_found":
            self._resolve(f"page not found: {msg.page_not_found.page_name!r}")
        elif kind == "script_finished":
            self._frag_sent = 0.0
            status = msg.script_finished
            if status == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                self._resolve("the script did not compile")
            elif status == ForwardMsg.FINISHED_SUCCESSFULLY and msg.metadata.run.script_run_id == self._run_id:
                self.elements = self._building
                self._fragment_of = {p: f for p, f in self._fragment_of.items() if p in self.elements}
                if self._full_started:
                    self._resolve("")
            elif (status == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY and self._fragment_run
                  and msg.metadata.run.script_run_id == self._fragment_run):
                for p in [p for p, f in self._fragment_of.items()
                          if f == self._want_fragment and p not in self._fragment_drawn]:
                    self.elements.pop(p, None)  # what the fragment did not draw again is gone
                    self._fragment_of.pop(p, None)
                self._resolve("")

    async def _auto_reruns(self) -> None:
        """Rerun fragments with ``run_every`` like the frontend's timers, one in flight, none during a request."""
        while time.monotonic() < self.end_by:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            if self._waiter is not None or not self._auto or (self._frag_sent and now - self._frag_sent < _FRAGMENT_WAIT):
                continue
            for fid, due in list(self._auto.items()):
                if now < due[1]:
                    continue
                due[1] = now + due[0]
                msg = BackMsg()
                self._client_state(msg, page_hash=self.page_hash, page_name="", states=self._page_states())
                msg.rerun_script.fragment_id = fid
                msg.rerun_script.is_auto_rerun = True
                self._frag_sent = now
                try:
                    await self._ws.send(msg.SerializeToString())
                except Exception:  # noqa: BLE001 - the reader reports the broken connection
                    return
                break
