"""Caps per client address (explorer.session.client_limits, issue 45 part 3): the sliding windows, the caps, their thread
safety and bounded memory, the message in both languages, and, through AppTest, that a capped client gets the
message instead of the page while everything else stays as it was."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bertcore.errors import BertcoreError, ConfigError
from explorer.session import client_limits as cl
from explorer import i18n

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(autouse=True)
def _fresh_windows(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_REFUSED_DELAY", "0")  # the tests of the delay set their own
    for w in cl.WINDOWS.values():
        w.clear()
    yield
    for w in cl.WINDOWS.values():
        w.clear()


# ----------------------------------------------------------------------------- the window
def test_a_cap_allows_that_many_in_a_minute_then_says_how_long_to_wait():
    w = cl.SlidingWindow(window=60)
    assert [w.allow("a", 3, now=t) for t in (0.0, 20.0, 40.0)] == [0.0, 0.0, 0.0]
    assert w.allow("a", 3, now=50.0) == pytest.approx(10.0)  # the event at 0 leaves at 60
    assert w.count("a", now=50.0) == 3  # a refusal is not counted
    assert w.allow("a", 3, now=59.9) == pytest.approx(0.1)
    assert w.allow("a", 3, now=60.0) == 0.0  # sliding: the first event has left, the other two are still in
    assert w.allow("a", 3, now=61.0) == pytest.approx(19.0)
    assert w.count("a", now=61.0) == 3 and w.count("a", now=200.0) == 0


def test_after_a_burst_the_cap_comes_at_its_own_pace_not_all_at_once():
    """60 a minute with a burst of 10: 10 at once, then one a second; a client that waits gets its burst back."""
    w = cl.SlidingWindow(window=60)
    assert [w.allow("a", 60, 10, now=0.0) for _ in range(10)] == [0.0] * 10
    assert w.allow("a", 60, 10, now=0.0) == pytest.approx(1.0)  # the 11th: its turn is a second away
    assert w.allow("a", 60, 10, now=0.5) == pytest.approx(0.5)
    assert w.count("a", now=0.5) == 10  # refusals are not counted
    assert w.allow("a", 60, 10, now=1.0) == 0.0 and w.allow("a", 60, 10, now=1.0) == pytest.approx(1.0)
    # a tight loop gets one a second from then on, until the minute's 60 are used (11 so far, 49 more: at 2 ... 50 s)
    allowed = [t / 10 for t in range(11, 600) if w.allow("a", 60, 10, now=t / 10) == 0.0]
    assert allowed == [float(t) for t in range(2, 51)]
    assert w.allow("b", 60, 10, now=5.0) == 0.0  # each key its own bucket
    # the minute's cap still holds: a burst after a pause never makes more than 60 in a window
    w2 = cl.SlidingWindow(window=60)
    got = sum(w2.allow("c", 12, 10, now=t / 10) == 0.0 for t in range(0, 600))
    assert got == 12  # 10 at once, then one per 5 s for 10 s; then the minute's 12 are used
    assert w2.allow("c", 12, 10, now=61.0) == 0.0  # the first ones have left the minute, and tokens are back
    w.refund("a")  # a refund gives the turn back as well as the count
    assert w.allow("a", 60, 10, now=59.9) == 0.0


def test_a_burst_of_0_is_no_pace_and_the_setting_is_read(monkeypatch):
    w = cl.SlidingWindow(window=60)
    assert all(w.allow("a", 30, 0, now=0.0) == 0.0 for _ in range(30))  # the whole minute's cap at once
    assert w.allow("a", 30, 0, now=0.0) == pytest.approx(60.0)
    assert cl.burst() == 10
    monkeypatch.setenv("BERTCORE_CLIENT_BURST", "2")
    monkeypatch.setenv("BERTCORE_CLIENT_RUNS_PER_MINUTE", "60")
    addr = "203.0.113.20"
    assert [cl.refusal("run", addr) is None for _ in range(3)] == [True, True, False]
    with i18n.using("en"):
        assert "at most 60 a minute" in cl.refusal("run", addr) and "Wait 1 s" in cl.refusal("run", addr)
    monkeypatch.setenv("BERTCORE_CLIENT_BURST", "0")
    assert cl.refusal("run", addr) is None  # no pace: only the minute's cap


def test_each_key_has_its_own_window_and_a_cap_of_0_is_no_cap():
    w = cl.SlidingWindow(window=60)
    assert w.allow("a", 1, now=0.0) == 0.0 and w.allow("a", 1, now=1.0) > 0
    assert w.allow("b", 1, now=1.0) == 0.0
    assert all(w.allow("c", 0, now=1.0) == 0.0 for _ in range(1000))
    assert len(w) == 2  # an uncapped action keeps nothing


def test_a_lowered_cap_takes_effect_and_a_refund_gives_the_event_back():
    w = cl.SlidingWindow(window=60)
    for t in range(5):
        assert w.allow("a", 10, now=float(t)) == 0.0
    assert w.allow("a", 2, now=5.0) == pytest.approx(63.0 - 5.0)  # the 4th oldest (t=3) must leave first
    w.refund("a")
    assert w.count("a", now=5.0) == 4
    w.refund("nobody")  # nothing to give back: no error
    assert len(w) == 1


def test_memory_is_bounded_by_max_keys_and_the_cap():
    w = cl.SlidingWindow(window=60, max_keys=100)
    for i in range(10_000):
        w.allow(f"10.0.{i // 256}.{i % 256}", 5, now=i * 0.001)
    assert len(w) == 100
    assert w.count("10.0.39.15", now=10.0) == 1 and w.count("10.0.0.0", now=10.0) == 0  # newest kept, oldest gone
    for _ in range(50):
        w.allow("10.0.39.15", 5, now=10.0)
    assert w.count("10.0.39.15", now=10.0) == 5  # at most its cap of timestamps
    # keys whose events have all left the window go first: a new minute starts from a near-empty table
    w.allow("new", 5, now=1000.0)
    assert len(w) == 1


def test_the_count_is_exact_when_many_threads_race():
    w = cl.SlidingWindow(window=60)
    allowed = []
    start = threading.Barrier(8)

    def hammer():
        start.wait()
        n = sum(1 for _ in range(2000) if w.allow("flood", 100, now=1.0) == 0.0)
        allowed.append(n)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(allowed) == 100 and w.count("flood", now=1.0) == 100


# ----------------------------------------------------------------------------- addresses and settings
@pytest.mark.parametrize("address, key", [
    (None, "local"), ("", "local"), ("203.0.113.7", "203.0.113.7"), ("127.0.0.2", "127.0.0.2"),
    ("::ffff:198.51.100.4", "198.51.100.4"), ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"), ("fe80::1%eth0", "fe80::/64"),
    ("not an address" * 10, ("not an address" * 10)[:64]),
])
def test_client_key(address, key):
    assert cl.client_key(address) == key


def test_the_server_machine_itself_is_not_capped_unless_asked(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_STARTS_PER_MINUTE", "1")
    assert cl.client_address() is None  # no session: the machine itself
    assert [cl.refusal("start") for _ in range(5)] == [None] * 5
    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    assert cl.refusal("start") is None and cl.refusal("start") is not None
    assert cl.refusal("start", "203.0.113.7") is None and cl.refusal("start", "203.0.113.7") is not None
    assert cl.refusal("upload", "203.0.113.7") is None  # each action has its own window


def test_the_message_names_the_cap_its_setting_and_the_wait_in_both_languages(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_STARTS_PER_MINUTE", "2")
    addr = "198.51.100.9"
    assert cl.refusal("start", addr) is None and cl.refusal("start", addr) is None
    with i18n.using("en"):
        en = cl.refusal("start", addr)
    assert en.startswith("Too many trainings started from your network address: at most 2 a minute")
    assert "BERTCORE_CLIENT_STARTS_PER_MINUTE" in en and "again in 60 s" in en
    with i18n.using("zh"):
        zh = cl.refusal("start", addr)
    assert "每分钟最多 2 次" in zh and "BERTCORE_CLIENT_STARTS_PER_MINUTE" in zh and "60 秒" in zh
    with pytest.raises(cl.ClientLimited, match="at most 2 a minute") as e:
        monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
        cl.WINDOWS["start"].allow("local", 2)
        cl.WINDOWS["start"].allow("local", 2)
        cl.charge("start")
    assert isinstance(e.value, BertcoreError)  # the pages show it like any error of the library


def test_a_setting_that_is_not_a_number_says_so(monkeypatch):
    monkeypatch.setenv("BERTCORE_CLIENT_UPLOADS_PER_MINUTE", "ten")
    with pytest.raises(ConfigError, match="BERTCORE_CLIENT_UPLOADS_PER_MINUTE='ten' is not a whole number"):
        cl.refusal("upload", "203.0.113.7")
    monkeypatch.setenv("BERTCORE_CLIENT_UPLOADS_PER_MINUTE", "-5")  # clamped to 0: no cap
    assert all(cl.refusal("upload", "203.0.113.7") is None for _ in range(20))


def test_an_upload_over_the_cap_is_refused_before_anything_is_extracted(monkeypatch, tmp_path):
    from explorer.session.uploads import load_checkpoint_zip

    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_UPLOADS_PER_MINUTE", "1")
    with pytest.raises(BertcoreError, match="not a readable zip"):
        load_checkpoint_zip(b"not a zip", tmp_path)  # the first is counted, and fails on its own
    with pytest.raises(cl.ClientLimited, match="Too many uploads"):
        load_checkpoint_zip(b"not a zip", tmp_path)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the app
def _app(lang: str = "en"):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60)
    if lang != "en":
        at.query_params["lang"] = lang
    return at


def _texts(at) -> str:
    return " ".join(str(e.value) for e in at.error)


def test_a_capped_client_gets_the_message_instead_of_a_new_session(monkeypatch):
    """AppTest has no client address: it is the server machine itself, capped here with BERTCORE_CLIENT_CAP_LOCAL."""
    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_SESSIONS_PER_MINUTE", "1")
    first = _app().run()
    assert not first.exception and not first.error and first.title  # the Overview, drawn
    title = first.title[0].value
    second = _app("zh").run()
    assert not second.exception and len(second.error) == 1 and not second.title  # the message and nothing else
    assert "新会话过多" in second.error[0].value and "BERTCORE_CLIENT_SESSIONS_PER_MINUTE" in second.error[0].value
    assert cl.WINDOWS["session"].count("local") == 1 and cl.WINDOWS["run"].count("local") == 1
    first.run()  # the admitted session goes on as before
    assert not first.error and first.title[0].value == title
    assert cl.WINDOWS["session"].count("local") == 1 and cl.WINDOWS["run"].count("local") == 2
    cl.WINDOWS["session"].clear()  # a minute later: the refused session asks again at its next run and is let in
    second.run()
    assert not second.error and second.title


def test_page_runs_over_the_cap_show_the_message_and_keep_the_session(monkeypatch):
    slept = []
    monkeypatch.setattr(cl, "sleep", slept.append)
    monkeypatch.setenv("BERTCORE_CLIENT_REFUSED_DELAY", "2.5")
    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_RUNS_PER_MINUTE", "2")
    at = _app().run()
    at.switch_page("app_pages/predict.py").run()
    assert not at.error and at.title
    ws = at.session_state["bx_ws"] if "bx_ws" in at.session_state else None
    at.run()
    assert _texts(at).startswith("Too many page requests from your network address: at most 2 a minute")
    assert not at.title
    assert slept == [2.5]  # a refused run answers after the delay (a tight loop gets one answer per delay)
    at.run()
    at.run()
    assert slept == [2.5, 5.0, 10.0]  # each refusal in a row of this session waits twice as long
    cl.WINDOWS["run"].clear()
    at.run()
    assert not at.error and at.title  # the same session, its page and workspace as they were
    assert slept == [2.5, 5.0, 10.0] and at.session_state["bx_client_refusals"] == 0  # admitted: the count restarts
    assert (at.session_state["bx_ws"] if "bx_ws" in at.session_state else None) == ws


def test_the_refused_delay_doubles_up_to_a_minute():
    assert [cl.escalated_delay(n, 3.0) for n in range(0, 9)] == [0.0, 3.0, 6.0, 12.0, 24.0, 48.0, 60.0, 60.0, 60.0]
    assert cl.escalated_delay(10_000, 3.0) == 60.0  # no overflow however long a script insists
    assert cl.escalated_delay(5, 0.0) == 0.0  # BERTCORE_CLIENT_REFUSED_DELAY=0: no delay at all


def test_start_over_the_cap_starts_nothing_and_says_so(monkeypatch, _runs_dir_in_tmp):
    from explorer.launch import launcher

    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_STARTS_PER_MINUTE", "1")
    at = _app().run()
    at.switch_page("app_pages/train.py").run()
    assert not at.button(key="train_start").disabled
    assert cl.WINDOWS["start"].allow("local", 1) == 0.0  # this client's one Start of the minute is used
    at.button(key="train_start").click().run()
    assert not at.exception
    assert "Too many trainings started from your network address: at most 1 a minute" in _texts(at)
    assert not at.button(key="train_start").disabled  # nothing runs
    assert launcher._K_RUN not in at.session_state
    assert not any(p.name != "workspace.json" for p in _runs_dir_in_tmp.rglob("*") if p.is_file())
    assert cl.WINDOWS["start"].count("local") == 1


def test_a_start_the_server_refuses_is_given_back(monkeypatch, tmp_path):
    """A Start that meets "Server busy" trains nothing, so it does not count against the client's Starts."""
    from bertcore.config import BertConfig, TrainConfig
    from explorer.launch import training_slots
    from bertcore.launch.service import RunSpec
    from explorer.launch.training_run import TrainingRun

    monkeypatch.setenv("BERTCORE_CLIENT_CAP_LOCAL", "1")
    monkeypatch.setenv("BERTCORE_CLIENT_STARTS_PER_MINUTE", "3")
    monkeypatch.setenv("BERTCORE_MAX_TRAININGS", "1")
    training_slots.acquire_slot(-1)  # the one slot is taken
    try:
        run = TrainingRun([RunSpec(BertConfig(), TrainConfig(steps=5), name="model")], runs_dir=tmp_path)
        for _ in range(5):
            with pytest.raises(training_slots.ServerBusy):
                run.start()
        assert cl.WINDOWS["start"].count("local") == 0 and not run.running
    finally:
        training_slots.release_slot(-1)
    for _ in range(3):
        cl.WINDOWS["start"].allow("local", 3)
    with pytest.raises(cl.ClientLimited):
        run.start()  # over the client's cap: refused before a slot is taken
    assert training_slots.running_trainings() == 0 and not run.running
