"""The app-wide fuzz engine (issue 27), used by tests/test_app_fuzz.py.

It drives the app the way a browser does, through app.py's ``st.navigation`` router (AppTest), and needs no
list of pages or widgets: it takes the pages the router registers, and on each page every text input, text
area, number input and file uploader it finds in the widget tree (main area and sidebar). A page added later
is fuzzed without a change here.

Per page: one AppTest. First the *views*: every radio, toggle, checkbox, selectbox and segmented control of the
main area is set to each of its other options once; a view that reveals a fuzzable input not seen yet (Predict's
"Click words" sentence, Masking & NSP's typed pair, the Data page's uploader ...) is kept. Then, in each kept
view, *rounds*: one run fills every fuzzable input at once, text inputs with one hostile string, number inputs
with one extreme, uploaders with one hostile file, and checks the page; after each fixed hostile string every
enabled button is clicked too (one run per button), so the actions that read the inputs (Open a folder, Load a
checkpoint, Start) see them. Hypothesis-generated Unicode (seeded, ``derandomize=True``) adds rounds without
clicks.

A run passes when AppTest saw no exception element, no ``st.error`` shows ``page_errors.UNEXPECTED`` (a bug
caught by ``explorer.page_errors.user_action``), the logger ``explorer.page_errors`` logged nothing at ERROR
(also a BertcoreError that escaped to app.py's ``run_page``), and the run finished within the timeout.
"""
from __future__ import annotations

import io
import logging
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as hs
from streamlit.testing.v1 import AppTest

from explorer.page_errors import UNEXPECTED

FUZZ_KINDS = ("text_input", "text_area", "number_input", "file_uploader")
VIEW_KINDS = ("radio", "toggle", "checkbox", "selectbox", "segmented_control")
MAX_VIEW_OPTIONS = 8  # a selectbox with more options (layers, heads ...) is explored through its first 8

FORMAT_ONLY = "\u202e\u200b\u200d"  # right-to-left override, zero-width space, zero-width joiner (issue 27)
HOSTILE_TEXTS = [
    "", " ", "\t\n  \r\n", FORMAT_ONLY, "\ufeff", "\u200b" * 40, "\u00a0\u3000\u2028\u2029", "\x00", "\x1b[31mred\x1b[0m",
    "[MASK]", "[CLS]", "[SEP]", "<mask>", "[mask]", "[MASK", "[CLS] [SEP] [PAD] [UNK] [MASK]",
    "<sos> <eos> <pad> <unk> <mask>", "[MASK] " * 3, " ".join(["[MASK]"] * 400), "<mask>" * 300,
    f"{FORMAT_ONLY}[MASK]{FORMAT_ONLY}", "the cat [MASK] on the mat .",
    ("the cat sat on the mat . " * 900)[:20_000], "x" * 20_000, "[MASK] " + "word " * 4_000, "😀" * 20_000,
    "😀 👩‍👩‍👧 🏳️‍🌈 🇯🇵", "שלום עולם", "مرحبا بالعالم", "the cat שלום [MASK] مرحبا 中文 ok", "我爱自然语言处理。",
    "日本語のテキストです", "한국어 문장", "e\u0301\u0301\u0301 Z\u0351\u0352\u0353algo",
    "<script>alert(1)</script>", "**bold** _it_ `code` # head", "$\\frac{1}{0}$ \\begin{align} x \\end{align}",
    "{{7*7}} ${7*7} %s %n", "'; DROP TABLE runs; --",
    "../../etc/passwd", "/etc/passwd", "/", "~", "~nosuchuser/x", "C:\\Windows\\System32", "\\\\server\\share",
    "file:///etc/passwd", "/dev/zero", "/proc/self", "a\x00b",
    "0", "-1", "1e309", "NaN", "-inf", "1,000", "0x1F", "١٢٣", "None",
    "line one\nline two\n\n\nline three", "A\tB", "\r", "##s ##ing", " [MASK] ",
]
_FRAGMENTS = ["[MASK]", "[CLS]", "[SEP]", "<mask>", "the", "cat", " ", "\n", "\u200b", "\u202e", "😀", "中文", "\x00"]
GENERATED = hs.one_of(
    hs.text(alphabet=hs.characters(exclude_categories=("Cs",)), max_size=300),
    hs.lists(hs.one_of(hs.sampled_from(_FRAGMENTS), hs.text(max_size=8)), max_size=40).map("".join))


def generated_texts(n: int) -> list[str]:
    """``n`` distinct strings from hypothesis, the same ones on every machine (derandomize)."""
    out: list[str] = []

    @settings(max_examples=n * 3, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(GENERATED)
    def collect(text):
        if text not in out and text not in HOSTILE_TEXTS and len(out) < n:  # new strings only
            out.append(text)

    collect()
    return out


def _zip(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def hostile_files(extension: str, good: dict[str, bytes], limit_bytes: int) -> list[tuple[str, bytes, str]]:
    """(name, bytes, mime) for an uploader that accepts ``extension``: empty, binary, over the size limit, UTF-16,
    truncated UTF-8 and zip, and the good file that uploader expects (``good[extension]``), whole and cut."""
    ok = good.get(extension, b"the cat sat .\tit slept .\n")
    files = {
        "empty": b"", "binary": bytes(range(256)) * 64, "huge": b"the cat sat .\tit slept .\n" * (limit_bytes // 20 + 1),
        "utf16": "the cat sat .\tit slept .\n".encode("utf-16") * 20, "utf8-cut": "naïve 😀 文".encode()[:-1] * 30,
        "zip-cut": _zip({"config.json": b"{}" * 500})[:100], "good": ok, "good-cut": ok[: max(1, len(ok) // 2)],
        "invisible": f"{FORMAT_ONLY}\t{FORMAT_ONLY}\n".encode() * 5 + ok, "nul": b"\x00",
    }
    return [(f"{k.replace(' ', '_')}.{extension}", v, "application/octet-stream") for k, v in files.items()]


def number_values(w) -> list[float]:
    """The number input's extremes: min, max, one step inside each, 0 / -1 where allowed, and one value beyond
    each bound (Streamlit keeps the old value; a browser cannot send NaN, so none is sent)."""
    lo, hi = w.min, w.max
    vals = [v for v in (lo, hi, 0, -1, 1) if v is not None]
    if lo is not None:
        vals += [lo + 1, lo - 1]
    if hi is not None:
        vals += [hi - 1, hi + 1]
    if lo is None:
        vals += [-(2**53), -1e300]
    if hi is None:
        vals += [2**53, 1e300]
    out = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


@dataclass
class Report:
    """What the fuzz did: ``inputs`` = distinct (where, widget, value) filled and checked; ``findings``: problems."""

    inputs: set = field(default_factory=set)
    runs: int = 0
    clicks: int = 0
    pages: list = field(default_factory=list)
    views: int = 0
    findings: list = field(default_factory=list)
    seconds: float = 0.0
    page_seconds: dict = field(default_factory=dict)

    @property
    def by_kind(self) -> dict[str, int]:
        """Distinct inputs per widget type."""
        out: dict[str, int] = {}
        for _, name, _ in self.inputs:
            kind = name.split(":", 1)[0]
            out[kind] = out.get(kind, 0) + 1
        return out

    def summary(self) -> str:
        return (f"{len(self.inputs)} distinct inputs ({', '.join(f'{k} {v}' for k, v in sorted(self.by_kind.items()))}) on "
                f"{len(self.pages)} pages, {self.views} views, {self.runs} runs, {self.clicks} button clicks, "
                f"{len(self.findings)} findings, {self.seconds:.0f} s ({self.page_seconds})")


class _Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record):
        self.records.append(record.getMessage())


def _wid(w) -> str:
    return w.key or f"{w.type}:{w.label}"


def _name(w) -> str:
    """A widget as a person sees it (keys may carry a preset name or a hash: the label does not)."""
    return f"{w.type}:{w.label}"


def _fuzzable(at: AppTest) -> dict[str, tuple[str, object]]:
    """id -> (where: "sidebar" | "main", widget) of every enabled fuzzable input."""
    out = {}
    for where, block in (("sidebar", at.sidebar), ("main", at.main)):
        for kind in FUZZ_KINDS:
            for w in getattr(block, kind):
                if not getattr(w.proto, "disabled", False):
                    out[_wid(w)] = (where, w)
    return out


class AppFuzz:
    """Fuzz every page ``app`` (a router script) registers.

    ``good``: extension -> a file its uploaders expect; ``limit_bytes``: the upload size limit in force (the "huge"
    file is over it); ``ws``: the workspace every session opens (``?ws=``), so its runs and fine-tunes show;
    ``texts``: the fixed hostile strings (default ``HOSTILE_TEXTS``); ``generated_per_page``: hypothesis strings
    added on each page; ``click_sidebar``: whether the sidebar's buttons are clicked too (its inputs are always
    filled); ``part=(k, n)``: the k-th of n shares of the strings (string i when i % n == k; each keeps its place
    in the list, so the n shares together fill and click exactly what one run would)."""

    def __init__(self, app: Path, good: dict[str, bytes], limit_bytes: int, *, ws: str | None = None,
                 texts: list[str] | None = None, generated_per_page: int = 10, timeout: float = 60,
                 click_sidebar: bool = True, part: tuple[int, int] = (0, 1)):
        self.app, self.good, self.limit, self.timeout, self.ws = Path(app), good, limit_bytes, timeout, ws
        self.click_sidebar = click_sidebar  # the sidebar is the same on every page: one page's fuzz may click it
        self.part = part  # (k, n): only every n-th string from the k-th, so n runs share a page's fuzz
        self.texts = list(HOSTILE_TEXTS if texts is None else texts)
        self.per_page = generated_per_page
        self.report = Report()
        self._errors = _Errors()
        self._clicked: set = set()

    # ------------------------------------------------------------------ plumbing
    def _new(self) -> AppTest:
        at = AppTest.from_file(str(self.app), default_timeout=self.timeout)
        if self.ws:
            at.query_params["ws"] = self.ws
        return at

    def pages(self) -> list[str]:
        """Script paths of every page the router registers. AppTest keeps st.navigation's pages in
        ``_registered_pages`` (what its own ``switch_page`` resolves against); there is no public accessor."""
        at = self._new().run()
        return [info["script_path"] for info in at._registered_pages.values() if info.get("script_path")]

    def _open(self, page: str) -> AppTest:
        at = self._new()
        at.run()
        at.switch_page(page)
        self._run(at, page, "open", "")
        return at

    def _run(self, at: AppTest, page: str, what: str, value) -> bool:
        """Run and check; a problem becomes a finding. True when the run was clean."""
        self.report.runs += 1
        self._errors.records.clear()
        try:
            at.run()
        except Exception as e:  # noqa: BLE001 - a timeout or a crash of the runner is a finding too
            self._find(page, what, value, f"the run failed: {type(e).__name__}: {e}")
            return False
        problems = [f"exception element: {e.value}" for e in at.exception]
        problems += [f"unexpected error shown: {e.value}" for e in at.error if UNEXPECTED in e.value]
        problems += [f"logged at ERROR: {m}" for m in self._errors.records]
        for p in problems:
            self._find(page, what, value, p)
        return not problems

    def _find(self, page, what, value, problem):
        shown = value if not isinstance(value, str) or len(value) < 80 else f"{value[:60]!r}... ({len(value)} chars)"
        self.report.findings.append(f"{Path(page).name} · {what} · {shown!r} · {problem[:400]}")

    # ------------------------------------------------------------------ views
    def _views(self, at: AppTest, page: str) -> list[tuple]:
        """[(kind, id, option) | None]: the default view, then each option that reveals new fuzzable inputs."""
        seen = {_name(w) for _, w in _fuzzable(at).values()}
        views: list = [None]
        controls = [(kind, _wid(w)) for kind in VIEW_KINDS for w in getattr(at.main, kind)
                    if not getattr(w.proto, "disabled", False)]
        for kind, wid in controls:
            w = self._widget(at, kind, wid)
            if w is None:
                continue
            original = w.value
            options = [True, False] if kind in ("toggle", "checkbox") else list(getattr(w, "options", []))
            for option in options[:MAX_VIEW_OPTIONS]:
                if not self._set_option(at, kind, wid, option):
                    continue
                self._run(at, page, f"view {wid}={option!r}", option)
                new = {_name(w) for _, w in _fuzzable(at).values()} - seen
                if new:
                    views.append((kind, wid, option))
                    seen |= new
            if self._set_option(at, kind, wid, original):
                self._run(at, page, f"view {wid} back", original)
        self.report.views += len(views)
        return views

    @staticmethod
    def _widget(at, kind, wid):
        for w in getattr(at.main, kind):
            if _wid(w) == wid:
                return w
        return None

    def _set_option(self, at, kind, wid, option) -> bool:
        w = self._widget(at, kind, wid)
        if w is None or getattr(w.proto, "disabled", False):
            return False
        try:
            w.set_value(option)
            getattr(w, "index", None)  # AppTest maps the label back to a value: fails for some format_funcs
        except Exception:  # noqa: BLE001 - an option AppTest cannot set by its label (a format_func): not explored
            w.set_value(w.value)
            return False
        return True

    # ------------------------------------------------------------------ rounds
    def _fill(self, at: AppTest, page: str, text: str, round_no: int) -> None:
        for where, w in _fuzzable(at).values():
            if w.type == "number_input":
                vals = number_values(w)
                value = vals[round_no % len(vals)]
            elif w.type == "file_uploader":
                ext = (w.allowed_type or [".bin"])[0].lstrip(".")
                vals = hostile_files(ext, self.good, self.limit)
                value = vals[round_no % len(vals)]
            else:
                cap = int(getattr(w.proto, "max_chars", 0) or 0)
                value = text[:cap] if cap else text  # the browser cuts a paste at max_chars
            w.set_value(value)
            scope = "sidebar" if where == "sidebar" else Path(page).name
            shown = value[0] if isinstance(value, tuple) else value
            self.report.inputs.add((scope, _name(w), shown if not isinstance(shown, str) else hash(shown)))

    def _click_all(self, at: AppTest, page: str, text: str) -> None:
        """Click every enabled button, each label with each value once in the whole fuzz (the sidebar's buttons
        and a page's "Train the default model" are the same action on every page)."""
        blocks = (at.main, at.sidebar) if self.click_sidebar else (at.main,)
        labels = [(b.key, b.label) for block in blocks for b in block.button
                  if not getattr(b.proto, "disabled", False)]
        for key, label in labels:
            btn = next((b for b in at.button if (b.key, b.label) == (key, label)), None)
            if btn is None or getattr(btn.proto, "disabled", False) or (label, text) in self._clicked:
                continue
            self._clicked.add((label, text))
            btn.click()
            self.report.clicks += 1
            self._run(at, page, f"click {key or label}", text)

    def fuzz_page(self, page: str, generated: list[str]) -> None:
        at = self._open(page)
        self.report.pages.append(page)
        for view in self._views(at, page):
            if view is not None:
                at = self._open(page)
                self._set_option(at, *view)
                self._run(at, page, f"view {view[1]}={view[2]!r}", view[2])
            if not _fuzzable(at):
                continue
            for i, text in enumerate(self.texts + generated):
                if i % self.part[1] != self.part[0]:
                    continue
                self._fill(at, page, text, i)
                clean = self._run(at, page, "fill", text)
                if i < len(self.texts) and clean:
                    self._click_all(at, page, text)
                if view is not None and not self._still_in(at, view):
                    break  # a click switched the view (e.g. a loaded checkpoint reran the page): stop this view

    def _still_in(self, at, view) -> bool:
        w = self._widget(at, view[0], view[1])
        return w is not None and w.value == view[2]

    def run(self, pages: list[str] | None = None) -> Report:
        """Fuzz ``pages`` (default: every page the router registers). A page gets the same generated strings
        whether it is fuzzed alone or with the others (its place in the router's list picks them)."""
        logger = logging.getLogger("explorer.page_errors")
        logger.addHandler(self._errors)
        t0 = time.time()
        try:
            every = self.pages()
            pages = pages if pages is not None else every
            order = every + [p for p in pages if p not in every]
            generated = generated_texts(self.per_page * len(order)) if self.per_page else []
            for page in pages:
                n = order.index(page)
                t = time.time()
                self.fuzz_page(page, generated[n * self.per_page:(n + 1) * self.per_page])
                self.report.page_seconds[Path(page).name] = round(time.time() - t, 1)
        finally:
            logger.removeHandler(self._errors)
            self.report.seconds = time.time() - t0
        return self.report
