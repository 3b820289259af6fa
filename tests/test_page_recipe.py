"""docs/PAGES.md's recipe for a new page is correct: its page runs as written, and its list of pages is app.py's."""
from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "PAGES.md").read_text(encoding="utf-8")


def _recipe() -> str:
    section = DOC[DOC.index("## For developers: a new page"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_recipe_page_runs_as_written():
    at = AppTest.from_string(_recipe(), default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Norms"
    assert any(m.value.startswith("Two to four sentences") for m in at.markdown)
    assert [m.value for m in at.markdown if m.value.endswith(" layers")]  # the user_action's section drew
    assert at.button(key="norms_train_default")  # the untrained model: the notice and the one-click training
    assert any("Untrained model" in i.value for i in at.info)


def test_the_recipe_names_app_pys_pages_and_tools():
    urls = re.search(r"URL paths equal the file stems: (.*?)\.\n\n", DOC, re.S).group(1)
    listed = [u.strip() for u in re.sub(r"\s*\(.*?\)", "", " ".join(urls.split())).split(", ")]
    src = (ROOT / "app.py").read_text(encoding="utf-8")
    registered = re.findall(r'^\s+\("(\w+)\.py", "(\w+)"', src, re.M)
    assert registered and all(f == u for f, u in registered)  # the URL path is the file stem
    assert listed == [u for _, u in registered]
    assert (ROOT / "scripts" / "i18n.sh").is_file() and (ROOT / "locale/zh_Hans/LC_MESSAGES/messages.po").is_file()
    assert "from explorer import state" not in DOC and "st.error(str(e))" not in DOC
