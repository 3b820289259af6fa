"""explorer.page_errors (issue 27): the one way a page shows an error. A library error becomes its message in an
st.error, a bug a short message with a "details" expander and a logged traceback; the page goes on after the block;
Streamlit's rerun passes through."""
from __future__ import annotations

import logging

from streamlit.testing.v1 import AppTest

from explorer.page_errors import UNEXPECTED


def _library_error():
    import streamlit as st

    from bertcore.errors import InputError
    from explorer.page_errors import user_action

    with user_action("Read the text") as act:
        raise InputError("the text is empty; type some text")
    st.write(f"failed={act.failed}")
    with user_action("Load it", "Checkpoint rejected: "):
        raise InputError("no config.json")
    st.write("after")


def _bug():
    import streamlit as st

    from explorer.page_errors import user_action

    @user_action("Explain the prediction")
    def section():
        st.write("before the bug")
        return {}["no such key"]

    st.write(f"returned={section()!r}")
    with user_action("Nothing wrong") as ok:
        st.write("fine")
    st.write(f"ok.failed={ok.failed}")


def _rerun():
    import streamlit as st

    from explorer.page_errors import user_action

    n = st.session_state.get("n", 0)
    st.session_state["n"] = n + 1
    with user_action("Rerun once"):
        if n == 0:
            st.rerun()
    st.write(f"run {st.session_state['n']}")


def _escaped():
    from bertcore.errors import InputError
    from explorer.page_errors import user_action

    with user_action("Some page", escaped=True):
        raise InputError("the text is empty")


def test_a_library_error_shows_its_message_and_the_page_goes_on(caplog):
    with caplog.at_level(logging.INFO, logger="explorer.page_errors"):
        at = AppTest.from_function(_library_error).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["the text is empty; type some text", "Checkpoint rejected: no config.json"]
    assert [m.value for m in at.markdown] == ["failed=True", "after"]
    assert not at.expander
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]


def test_a_bug_shows_a_short_message_with_details_and_logs_the_traceback(caplog):
    with caplog.at_level(logging.INFO, logger="explorer.page_errors"):
        at = AppTest.from_function(_bug).run()
    assert not at.exception
    (err,) = at.error
    assert err.value.startswith(UNEXPECTED) and "“Explain the prediction” (KeyError)" in err.value
    assert "Traceback" not in err.value
    assert [x.label for x in at.expander] == ["details"]
    assert at.expander[0].code[0].value == "KeyError: 'no such key'"
    assert [m.value for m in at.markdown] == ["before the bug", "returned=None", "fine", "ok.failed=False"]
    (rec,) = caplog.records
    assert rec.levelno == logging.ERROR and rec.exc_info and rec.exc_info[0] is KeyError


def test_streamlit_rerun_passes_through():
    at = AppTest.from_function(_rerun).run()
    assert not at.exception and not at.error
    assert at.session_state["n"] == 2 and [m.value for m in at.markdown] == ["run 2"]


def test_a_library_error_that_escaped_the_page_is_logged_as_an_error(caplog):
    with caplog.at_level(logging.INFO, logger="explorer.page_errors"):
        at = AppTest.from_function(_escaped).run()
    assert [e.value for e in at.error] == ["the text is empty"]
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "escaped the page" in caplog.records[0].getMessage()
