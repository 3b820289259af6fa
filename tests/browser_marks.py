"""What every browser test module shares: its pytest marks (``pytestmark = BROWSER``) and page constants."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness import CHROMIUM

BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}"),
]
LOAD = 120_000  # ms: a page's first draw on a fresh server includes torch's import
MAIN = '[data-testid="stMain"]'
