"""Page scripts in turn (explorer.session.page_slots): at most BERTCORE_PAGE_SLOTS run at once, a slot is given back
however the page ends, a stuck holder never blocks the others for longer than the wait, 0 means no limit, and a
setting that is not a whole number is a message on the page, through AppTest."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bertcore.errors import ConfigError
from explorer.session import page_slots

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("BERTCORE_PAGE_SLOTS", raising=False)
    page_slots.reset()
    yield
    page_slots.reset()


def _most_at_once(n_threads: int, hold: float, max_wait: float = 10.0) -> tuple[int, list[bool]]:
    """Run ``n_threads`` blocks of ``hold`` seconds through page_slot; the most that ran at once, and who got a slot."""
    lock, now, peak, got = threading.Lock(), [0], [0], []

    def page():
        with page_slots.page_slot(max_wait=max_wait) as slot:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
                got.append(slot)
            time.sleep(hold)
            with lock:
                now[0] -= 1

    threads = [threading.Thread(target=page) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return peak[0], got


def test_at_most_the_set_number_of_pages_run_at_once(monkeypatch):
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "2")
    peak, got = _most_at_once(8, 0.05)
    assert peak == 2 and got == [True] * 8
    assert page_slots.page_slots() == 2


def test_the_default_is_two_and_zero_means_no_limit(monkeypatch):
    assert page_slots.page_slots() == 2
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "0")
    page_slots.reset()
    peak, got = _most_at_once(6, 0.2)
    assert peak == 6 and got == [False] * 6  # no semaphore: nobody holds a slot, nobody waits


def test_a_slot_is_given_back_when_the_page_ends_with_an_exception(monkeypatch):
    """st.rerun and st.stop end a page with an exception: the slot must come back all the same."""
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "1")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            with page_slots.page_slot(max_wait=0.5) as slot:
                assert slot
                raise RuntimeError("st.rerun")
    with page_slots.page_slot(max_wait=0.5) as slot:
        assert slot  # still free: none was lost


def test_a_page_that_waited_too_long_runs_anyway_without_a_slot(monkeypatch):
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "1")
    held, release = threading.Event(), threading.Event()

    def stuck():
        with page_slots.page_slot():
            held.set()
            release.wait(10)

    t = threading.Thread(target=stuck)
    t.start()
    assert held.wait(5)
    start = time.monotonic()
    with page_slots.page_slot(max_wait=0.3) as slot:
        waited = time.monotonic() - start
    release.set()
    t.join(5)
    assert slot is False and 0.25 <= waited < 5
    with page_slots.page_slot(max_wait=0.5) as slot:
        assert slot  # the stuck one gave its slot back; the one without a slot gave back nothing


def test_a_setting_that_is_not_a_whole_number_says_so(monkeypatch):
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "two")
    with pytest.raises(ConfigError, match="BERTCORE_PAGE_SLOTS"):
        page_slots.semaphore()


def test_the_app_shows_a_bad_setting_as_a_message_and_runs_with_a_good_one(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "2.5")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and len(at.error) == 1 and not at.title
    assert "BERTCORE_PAGE_SLOTS" in at.error[0].value and "whole number" in at.error[0].value
    monkeypatch.setenv("BERTCORE_PAGE_SLOTS", "1")
    page_slots.reset()
    at.run()
    assert not at.exception and not at.error and at.title  # the Overview, drawn
    with page_slots.page_slot(max_wait=0.5) as slot:
        assert slot  # the page gave its one slot back
