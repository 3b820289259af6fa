"""bertviz head view / model view that work with no internet access.

bertviz's stock HTML loads require.js, d3 5.7 and jQuery 2.0 from cdnjs. Here we:

* drop the ``<script src=...require...js>`` tag and the ``require.config({paths: {...cdn...}})`` block;
* inline d3 v5 (shipped in the PyPI package ``mpld3`` as ``mpld3/js/d3.v5.min.js``) and jQuery
  (shipped in ``xstatic-jquery``), read from the installed packages once per process;
* define a tiny ``window.require(deps, cb)`` / ``requirejs`` shim that hands ``window.jQuery`` and
  ``window.d3`` to the callback, plus a no-op ``require.config``.

The result contains no ``http(s)://`` URL outside the inlined library sources (which only hold
XML namespace strings and licence comments, never fetched). Render it with ``st.iframe(html, height=...)``.
"""
from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

CDN_MARKERS = ("cdnjs", "cloudflare", "require.min.js", "unpkg.com", "jsdelivr")

_SHIM = """
(function () {
  var mods = function (name) {
    if (name === 'jquery') { return window.jQuery; }
    if (name === 'd3') { return window.d3; }
    return undefined;
  };
  var req = function (deps, cb) {
    if (typeof deps === 'string') { return mods(deps); }
    var args = (deps || []).map(mods);
    if (typeof cb === 'function') { cb.apply(window, args); }
  };
  req.config = function () {};
  window.require = req;
  window.requirejs = req;
})();
"""


@functools.lru_cache(maxsize=1)
def _d3_source() -> str:
    mpld3 = importlib.import_module("mpld3")
    path = Path(mpld3.__file__).parent / "js" / "d3.v5.min.js"
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _jquery_source() -> str:
    jq = importlib.import_module("xstatic.pkg.jquery")
    path = Path(jq.BASE_DIR) / "jquery.min.js"
    return path.read_text(encoding="utf-8")


def _safe_inline(js: str) -> str:
    # a literal "</script" inside an inline script would end the block early
    return js.replace("</script", "<\\/script")


def offline_prelude() -> str:
    """The <script> blocks that replace require.js + the CDN downloads."""
    return (
        "<script type=\"text/javascript\">" + _safe_inline(_d3_source()) + "</script>\n"
        "<script type=\"text/javascript\">" + _safe_inline(_jquery_source()) + "</script>\n"
        "<script type=\"text/javascript\">" + _SHIM + "</script>\n"
    )


_SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"'][^\"']*[\"'][^>]*>\s*</script>", re.I)
_REQUIRE_CONFIG = re.compile(r"require\.config\(\s*\{.*?\}\s*\}\s*\)\s*;", re.S)
_URL = re.compile(r"https?://[^\s\"'<>]+")
_LONG_FLOAT = re.compile(r"(\b\d\.\d{5})\d+")


def make_offline(html: str) -> str:
    """Turn bertviz's HTML into a self-contained document (no network requests)."""
    body = _SCRIPT_SRC.sub("", html)
    body = _REQUIRE_CONFIG.sub("/* offline: d3 and jQuery are inlined above */", body)
    # any other URL in bertviz's own code is in a comment (credits); drop it so nothing can be fetched
    body = _URL.sub("", body)
    # bertviz dumps float32 values through float64 (0.12300000339746475); 5 digits are plenty for a picture
    body = _LONG_FLOAT.sub(r"\1", body)
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head>"
        "<body style=\"margin:0;background:#fff\">\n"
        + offline_prelude()
        + body
        + "\n</body></html>"
    )


def _to_torch(attentions: np.ndarray):
    A = np.asarray(attentions, dtype=np.float32)
    if A.ndim != 4:
        raise ValueError(f"attentions must be [L, H, T, T], got {A.shape}")
    return tuple(torch.from_numpy(np.ascontiguousarray(A[i]))[None] for i in range(A.shape[0]))


def _clean_tokens(tokens: Sequence[str]) -> list[str]:
    return [str(t) for t in tokens]


def head_view_html(
    attentions: np.ndarray,
    tokens: Sequence[str],
    sentence_b_start: int | None = None,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
) -> str:
    """Offline bertviz head view for attentions ``[L, H, T, T]`` (layer/heads are 0-based)."""
    from bertviz import head_view

    kw = {}
    if layer is not None:
        kw["layer"] = int(layer)
    if heads is not None:
        kw["heads"] = [int(h) for h in heads]
    out = head_view(
        _to_torch(attentions), _clean_tokens(tokens), sentence_b_start=sentence_b_start,
        html_action="return", **kw,
    )
    return make_offline(out.data)


def model_view_html(
    attentions: np.ndarray,
    tokens: Sequence[str],
    sentence_b_start: int | None = None,
    display_mode: str = "light",
) -> str:
    """Offline bertviz model view (all layers x heads thumbnails)."""
    from bertviz import model_view

    out = model_view(
        _to_torch(attentions), _clean_tokens(tokens), sentence_b_start=sentence_b_start,
        html_action="return", display_mode=display_mode,
    )
    return make_offline(out.data)


def bertviz_part(html: str) -> str:
    """The HTML after the inlined libraries (bertviz's own markup and code), for checks."""
    marker = "window.requirejs = req;"
    i = html.find(marker)
    return html[i:] if i >= 0 else html


def has_cdn_reference(html: str) -> bool:
    """True if the HTML would try to fetch anything: an external script src or a CDN marker."""
    if re.search(r"<script[^>]*\bsrc\s*=", html, re.I):
        return True
    low = html.lower()
    if any(m in low for m in CDN_MARKERS):
        return True
    return bool(_URL.search(bertviz_part(html)))
