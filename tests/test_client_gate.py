"""The client gate (explorer/session/client_gate.py, serve.py): one address's websocket connections over a cap are
refused before Streamlit makes a session of them; everything else passes untouched."""
from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from explorer.session import client_gate
from explorer.session.client_gate import POLICY_VIOLATION, ClientGate


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    client_gate.clear()
    monkeypatch.setenv("BERTCORE_CLIENT_REFUSED_DELAY", "0")
    for k in ("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", "BERTCORE_CLIENT_CONNECT_BURST", "BERTCORE_CLIENT_CONNECTIONS",
              "BERTCORE_CLIENT_CAP_LOCAL", "BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE"):
        monkeypatch.delenv(k, raising=False)
    yield
    client_gate.clear()


class App:
    """The Streamlit behind the gate: records who reached it; a connection stays open until ``release`` is set."""

    def __init__(self):
        self.reached: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, scope, receive, send):
        self.reached.append(scope["client"][0] if scope.get("client") else scope["type"])
        if scope["type"] == "websocket":
            await self.release.wait()


def run(coro):
    """``asyncio.run`` in a thread of its own: in the full suite a browser test's event loop may still be set in
    this thread, where asyncio.run refuses to start another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def ws(host: str, path: str = "/_stcore/stream") -> dict:
    return {"type": "websocket", "path": path, "client": (host, 50000)}


def http(host: str, path: str = "/", query: bytes = b"", method: str = "GET") -> dict:
    return {"type": "http", "method": method, "path": path, "query_string": query, "client": (host, 50000)}


async def connect(gate, scope) -> list[dict]:
    """One connection through the gate; what the gate itself sent back (nothing when the app took it)."""
    sent: list[dict] = []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(msg):
        sent.append(msg)

    await gate(scope, receive, send)
    return sent


def test_turns_come_from_a_token_bucket_and_a_turn_too_far_away_is_refused(monkeypatch):
    """60 a minute with a burst of 3: three connections at once go in, the next ones wait 1 s, 2 s, ... for their
    turn (a coroutine sleeps; no session exists yet), and one whose turn is more than MAX_WAIT away is refused."""
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", "60")
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "3")
    key = "10.0.0.9"
    waits = [client_gate.admit(key, now=100.0) for _ in range(3 + int(client_gate.MAX_WAIT))]
    assert waits == [0.0, 0.0, 0.0] + [float(k) for k in range(1, int(client_gate.MAX_WAIT) + 1)]
    assert client_gate.admit(key, now=100.0) == "connects"  # 11 s away
    assert client_gate.admit(key, now=102.0) == float(client_gate.MAX_WAIT - 1)  # 2 s later two turns came back
    assert client_gate.open_connections(key) == 3 + int(client_gate.MAX_WAIT) + 1  # the waiting ones count as open
    assert client_gate.admit("10.0.0.10", now=100.0) == 0.0  # each address has its own bucket


def test_a_script_over_the_connect_cap_is_refused_before_the_app_and_others_are_not(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", "2")
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "2")  # a third connection's turn is 30 s away: refused

    async def main():
        app = App()
        app.release.set()  # each connection ends at once
        gate = ClientGate(app)
        answers = [await connect(gate, ws("10.0.0.5")) for _ in range(3)]
        assert answers[:2] == [[], []] and answers[2] == [{"type": "websocket.close", "code": POLICY_VIOLATION}]
        assert app.reached == ["10.0.0.5", "10.0.0.5"]  # the third never became a session
        assert await connect(gate, ws("10.0.0.6")) == []  # another student's address is not touched
        assert await connect(gate, http("10.0.0.5", "/static/js/index.js")) == []  # files pass
        assert await connect(gate, ws("10.0.0.5", "/_stcore/health")) == []  # only the app's stream is counted
        for _ in range(5):  # the server machine itself (a personal machine, a proxy without an address)
            assert await connect(gate, ws("127.0.0.1")) == []
        assert app.reached.count("127.0.0.1") == 5
        assert client_gate.refused["connects"] >= 1

    run(main())


def test_the_open_connections_cap_frees_a_place_when_one_closes(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECTIONS", "1")

    async def main():
        app = App()
        gate = ClientGate(app)
        first = asyncio.create_task(connect(gate, ws("2001:db8::1")))
        await asyncio.sleep(0.05)
        assert client_gate.open_connections("2001:db8::/64") == 1
        # the same /64 network is the same client (one host usually holds a whole /64)
        assert await connect(gate, ws("2001:db8::2")) == [{"type": "websocket.close", "code": POLICY_VIOLATION}]
        app.release.set()
        assert await first == []
        assert client_gate.open_connections("2001:db8::/64") == 0
        assert await connect(gate, ws("2001:db8::2")) == []

    run(main())


def test_local_connections_are_capped_when_the_operator_asks(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")

    async def main():
        app = App()
        app.release.set()
        gate = ClientGate(app)
        assert await connect(gate, ws("127.0.0.1")) == []
        assert await connect(gate, ws("::1")) == [{"type": "websocket.close", "code": POLICY_VIOLATION}]

    run(main())


def test_a_bad_setting_says_which(monkeypatch):
    from bertcore.errors import ConfigError

    monkeypatch.setenv("BERTCORE_CLIENT_CONNECTS_PER_MINUTE", "lots")
    with pytest.raises(ConfigError, match="BERTCORE_CLIENT_CONNECTS_PER_MINUTE"):
        client_gate.connects_cap()


def test_serve_py_puts_the_gate_in_front_of_the_real_server(tmp_path):
    """``streamlit run serve.py``: the app as ``streamlit run app.py`` serves it, and a third connection a minute
    from 127.0.0.2 (the cap set to 2) gets HTTP 403 on its websocket upgrade, while 127.0.0.1 opens the page."""
    from bench.harness import AppServer
    from loadgen.protocol import StreamlitTab

    server = AppServer(tmp_path / "server.log", script="serve.py", env={
        "BERTCORE_CLIENT_CONNECTS_PER_MINUTE": "2", "BERTCORE_CLIENT_CONNECT_BURST": "2",
        "BERTCORE_CLIENT_REFUSED_DELAY": "0"}).start(timeout=180)

    async def main():
        tabs = [StreamlitTab(server.port, source="127.0.0.2", timeout=180) for _ in range(3)]
        local = StreamlitTab(server.port, timeout=180)
        try:
            results = [await t.open() for t in tabs]
            mine = await local.open()
        finally:
            for t in tabs + [local]:
                await t.close()
        return results, mine

    try:
        results, mine = run(main())
    finally:
        server.stop()
    assert [r.ok for r in results] == [True, True, False], [r.error for r in results]
    assert "403" in results[2].error
    assert mine.ok, mine.error
    assert "Traceback" not in server.log_tail(200)


def test_a_flood_waits_ever_longer_for_its_refusals(monkeypatch):
    """The first burst of refusals in a minute is told after the base delay, each further burst waits twice as long,
    up to a minute; another address starts again at the base delay."""
    monkeypatch.setenv("BERTCORE_CLIENT_REFUSED_DELAY", "3")
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "2")
    delays = [client_gate.refusal_delay("10.0.0.7") for _ in range(14)]
    assert delays == [3, 3, 6, 6, 12, 12, 24, 24, 48, 48, 60, 60, 60, 60]
    assert client_gate.refusal_delay("10.0.0.8") == 3


@pytest.mark.parametrize("path, page", [("/", True), ("/train", True), ("/attention/", True),
                                        ("/static/js/index.abc.js", False), ("/_stcore/health", False),
                                        ("/media/x.png", False), ("/favicon.png", False),
                                        ("/component/bertviz/index.html", False), ("/app/static/a", False)])
def test_which_requests_are_page_loads(path, page):
    assert client_gate.is_page_load(http("10.0.0.1", path)) is page
    assert client_gate.is_page_load(http("10.0.0.1", path, method="POST")) is False
    assert client_gate.is_page_load({"type": "websocket", "path": path}) is False


def test_page_loads_over_their_bucket_get_429_with_the_wait_in_the_link_s_language(monkeypatch):
    """2 page loads a minute (burst 2): the third GET of the app's page from one address gets HTTP 429 from the gate
    (Streamlit never serves it), with Retry-After and a message in English or, with ?lang=zh, Chinese; its
    websocket connections, static files, another address and the server machine itself are not touched."""
    monkeypatch.setenv("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE", "2")
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "2")

    async def main():
        app = App()
        app.release.set()
        gate = ClientGate(app)
        assert await connect(gate, http("10.0.0.5", "/")) == []
        assert await connect(gate, http("10.0.0.5", "/train")) == []
        refused = await connect(gate, http("10.0.0.5", "/"))
        assert refused[0]["type"] == "http.response.start" and refused[0]["status"] == 429
        headers = dict(refused[0]["headers"])
        assert headers[b"retry-after"] == b"30" and headers[b"content-type"].startswith(b"text/plain")
        body = refused[1]["body"].decode()
        assert body.startswith("Too many page loads from your network address: at most 2 a minute")
        assert "BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE" in body and "Reload in 30 s" in body
        assert int(headers[b"content-length"]) == len(refused[1]["body"])
        zh = (await connect(gate, http("10.0.0.5", "/predict", b"ws=abc&lang=zh")))[1]["body"].decode()
        assert "BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE" in zh and "30 秒" in zh
        assert app.reached == ["10.0.0.5", "10.0.0.5"]  # the refused loads never reached Streamlit
        assert await connect(gate, http("10.0.0.5", "/static/js/index.js")) == []
        assert await connect(gate, ws("10.0.0.5")) == []  # the websocket has a bucket of its own
        assert await connect(gate, http("10.0.0.6", "/")) == []
        for _ in range(4):
            assert await connect(gate, http("127.0.0.1", "/")) == []
        assert client_gate.refused["pages"] >= 2

    run(main())
    monkeypatch.setenv("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE", "60")  # the wait told is the turn's, not a guess
    monkeypatch.setenv("BERTCORE_CLIENT_CONNECT_BURST", "10")
    assert [client_gate.admit_page("10.0.0.9", now=0.0) for _ in range(20)] == [0.0] * 10 + [float(k) for k in
                                                                                             range(1, 11)]
    assert client_gate.admit_page("10.0.0.9", now=0.0) is None  # its turn is 11 s away
    assert client_gate.page_wait("10.0.0.9", now=0.0) == pytest.approx(11.0)
    assert client_gate.page_wait("10.0.0.9", now=4.0) == pytest.approx(7.0)
    monkeypatch.setenv("BERTCORE_CLIENT_PAGE_LOADS_PER_MINUTE", "0")  # 0: no cap on page loads
    assert [client_gate.admit_page("10.0.0.7", now=5.0) for _ in range(50)] == [0.0] * 50
