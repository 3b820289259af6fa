"""Open a page of the app in AppTest with a given model active (shared by the page tests)."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer.session import workspace

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def open_page(page: str, am=None, timeout: float = 60, **query) -> AppTest:
    """Run app.py, then ``page`` (e.g. "app_pages/predict.py"), with ActiveModel ``am`` active (if given) and
    ``query`` as URL parameters; fails on any exception element."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    if am is not None:
        at.session_state[workspace.MODELS_KEY] = {am.label: am}
        at.session_state[workspace.ACTIVE_KEY] = am.label
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at
