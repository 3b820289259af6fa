"""The one way a page shows an error: wrap every user action in ``user_action``.

    from explorer.page_errors import user_action

    with user_action("Predict the next sentence") as act:      # a block ...
        p = nsp_probability(model, tok, a, b)
    if act.failed:
        return
    st.metric("P(IsNext)", f"{p:.1%}")

    @user_action("Explain the prediction")                      # ... or a whole function (it returns None on error)
    def _why_section(active, text, pair): ...

* A ``bertcore.errors.BertcoreError`` (InputError, ConfigError, CorpusError, CheckpointError ...) becomes
  ``st.error(<the library's message>)``: the library says what is wrong and what to do, the page never writes its
  own copy of that rule. ``prefix`` puts a few words of context in front ("Checkpoint rejected: ").
* Anything else is a bug: the user gets a short ``st.error`` starting with ``UNEXPECTED`` and a "details"
  expander (the exception's type and message, no traceback on screen); the server log gets the traceback
  (logger ``explorer.page_errors``, level ERROR).
* In both cases the exception stops at the end of the ``with`` block: the rest of the page is drawn.
  Streamlit's own control flow (``st.rerun``, ``st.stop``, ``st.switch_page``) raises BaseException subclasses,
  which pass through untouched.

``run_page`` is app.py's last resort around the whole page: whatever a page did not catch itself is shown the
same way, and logged at ERROR even for a BertcoreError, because the rest of that page was not drawn. The
app-wide fuzz (tests/test_app_fuzz.py) fails on any ERROR record of this logger.
"""
from __future__ import annotations

import functools
import logging

import streamlit as st

from bertcore.errors import BertcoreError
from bertcore.message import Message, reason
from explorer.i18n import tr

log = logging.getLogger(__name__)

UNEXPECTED = "Something unexpected went wrong"
MAX_DETAIL_CHARS = 2_000


class user_action:  # noqa: N801 - used like a function: `with user_action(...)`, `@user_action(...)`
    """Context manager (and decorator) that turns an exception of one user action into a message on the page.

    ``failed`` is True after the block raised. ``what`` names the action in the message and the log."""

    def __init__(self, what: str, prefix: str = "", *, escaped: bool = False):
        self.what = what
        self.prefix = prefix
        self.escaped = escaped  # run_page: the error escaped every user_action of the page
        self.failed = False

    def __enter__(self) -> user_action:
        self.failed = False
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False  # no error, or Streamlit's rerun/stop (BaseException): let it through
        self.failed = True
        if isinstance(exc, BertcoreError):
            if self.escaped:
                log.error("%s: %s escaped the page (wrap the action in explorer.page_errors.user_action): %s",
                          self.what, type(exc).__name__, exc)
            else:
                log.info("%s: %s: %s", self.what, type(exc).__name__, exc)
            st.error(f"{self.prefix}{error_text(exc)}")
        else:
            log.error("%s: unexpected %s", self.what, type(exc).__name__, exc_info=(kind, exc, tb))
            show_unexpected(self.what, exc)
        return True

    def __call__(self, fn):
        """``@user_action("...")``: each call of ``fn`` runs in a fresh ``user_action`` (None when it failed)."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with user_action(self.what, self.prefix, escaped=self.escaped):
                return fn(*args, **kwargs)
            return None

        return wrapper


def error_text(exc: BaseException) -> str:
    """A bertcore error's message in the session's language: bertcore raises its user-facing errors with a
    ``bertcore.message.Message``, whose template the catalogue translates; any other message stays as written."""
    msg = reason(exc)
    return tr(msg) if isinstance(msg, Message) else msg


def show_unexpected(what: str, exc: BaseException) -> None:
    """The short message and the "details" expander for a bug (no traceback on screen)."""
    st.error(tr("Something unexpected went wrong in “{what}” ({kind}). The rest of the page still works; try other "
                "input. The server log has the details for a bug report.", what=what, kind=type(exc).__name__))
    with st.expander(tr("details")):
        st.code(f"{type(exc).__name__}: {str(exc)[:MAX_DETAIL_CHARS]}", language=None, wrap_lines=True)


def run_page(page) -> None:
    """app.py: run the ``st.navigation`` page; an error no user action of the page caught is shown, not raised."""
    with user_action(getattr(page, "title", None) or tr("this page"), escaped=True):
        page.run()
