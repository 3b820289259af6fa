"""Issue 27: any text on any page gives a message, never Streamlit's error screen.

* the app-wide fuzz (engine in tests/app_fuzz.py) through app.py's router: every text input, text area, number
  input and file uploader of every registered page, >= 1,000 inputs, 0 exceptions, in a workspace that holds a run
  and a saved fine-tune so the inputs that only appear then are fuzzed too; one test per page (a long page's in
  shares of the strings), each with its floor of inputs, so pytest-xdist spreads them;
* a deliberately broken page makes the fuzz fail (an unexpected exception, a library error that escaped the
  page's user actions, and an exception with no guard at all);
* the issue's own case: on Predict, a sentence A of invisible format characters shows the library's message in an
  st.error while fill-mask still answers; the CLI says the same;
* the one rule for "empty" lives in bertcore (``bertcore.data.user_text``): pages do not judge it with ``.strip()``.
"""
from __future__ import annotations

import ast
import io
import logging
import time
import zipfile
from pathlib import Path

import pytest
import streamlit
from streamlit.testing.v1 import AppTest

from app_fuzz import FORMAT_ONLY, FUZZ_KINDS, AppFuzz
from explorer.launch import training_run, training_slots
from explorer.page_errors import UNEXPECTED

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
LIMIT = 20_000  # BERTCORE_MAX_CORPUS_BYTES during the fuzz: its "huge" upload is over it


def _app_pages() -> list[str]:
    """The page files app.py's PAGES lists (read with ast: app.py is a script)."""
    tree = ast.parse(APP.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PAGES")
    return [ast.literal_eval(row.elts[0]) for row in node.value.elts]  # the file name (titles are mark(...) calls)


@pytest.fixture(scope="module")
def good_files(tmp_path_factory) -> dict[str, bytes]:
    """What each uploader expects: a corpus (.txt), a tiny checkpoint (.zip), a task (.csv)."""
    from bertcore.config import BertConfig
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.io.checkpoint import ModelBundle, save_checkpoint
    from bertcore.model.bert import init_model

    texts = ["the cat sat on the mat .", "it slept all day .", "the dog ran in the park .", "it was happy ."]
    tok = WordTokenizer.build(texts)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                     num_hidden_layers=1, max_position_embeddings=32)
    d = tmp_path_factory.mktemp("tiny")
    save_checkpoint(ModelBundle(model=init_model(cfg, 0), tokenizer=tok, name="tiny", source="test"), d)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in d.iterdir():
            zf.writestr(f.name, f.read_bytes())
    rows = [f"the {w} sat on the mat,{'a' if i % 2 else 'b'}" for i, w in enumerate(["cat", "dog", "cow", "hen"] * 6)]
    return {"txt": "\n".join(f"{texts[i]}\t{texts[i + 1]}" for i in range(3)).encode() * 4,
            "zip": buf.getvalue(), "csv": ("text,label\n" + "\n".join(rows) + "\n").encode()}


def _seed_workspace(good: dict[str, bytes]) -> str:
    """A workspace with a finished run (an uploaded tiny checkpoint) and a saved fine-tune of it, made through the
    app, so that the sidebar's run manager and the Fine-tune page's "Try it" inputs exist for the fuzz."""
    from bertcore.training import runs

    ws = runs.new_workspace_id()
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["ws"] = ws
    at.run()
    at.switch_page("app_pages/train.py").run()
    at.file_uploader(key="train_upload").set_value(("tiny.zip", good["zip"], "application/zip")).run()
    at.button(key="train_load_upload").click().run()
    at.switch_page("app_pages/finetune.py").run()
    at.selectbox(key="finetune_model").select("uploaded: tiny.zip").run()
    at.select_slider(key="finetune_labels").set_value(16).run()
    at.select_slider(key="finetune_steps").set_value(10).run()
    at.button(key="finetune_start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    run = training_run.find_live(ws, "bx_finetune_run")
    assert run is not None
    t0 = time.monotonic()
    while run.running and time.monotonic() - t0 < 300:  # the page's heartbeat (AppTest runs no fragment timers)
        run.snapshot()
        time.sleep(0.2)
    assert run.snapshot().status == "finished"
    runs.write_workspace(ws, active="untrained")  # the fuzz starts from the default model
    return ws


# What each page's fuzz must reach (a floor: the fuzz is deterministic, so today's counts; more is fine): distinct
# inputs of the page's own area, the widget kinds among them and inputs that only show behind a radio, a selectbox
# or a saved fine-tune. The sidebar is the same on every page: SIDEBAR, checked on each.
SIDEBAR = (74, {"text_input:Name"})
COVERAGE: dict[str, tuple[tuple[int, ...], set[str], set[str]]] = {  # (a floor per share, kinds, names)
    "overview.py": ((0,), set(), set()),
    "data_tokens.py": ((158,), {"text_input", "text_area", "file_uploader"},
                       {"file_uploader:Upload a UTF-8 .txt corpus"}),
    "masking_nsp.py": ((77, 77), {"text_input", "number_input"}, {"text_input:sentence A"}),
    "positional_encoding.py": ((148,), {"text_input"}, {"text_input:sentence A"}),
    "embeddings.py": ((74,), {"text_area"}, set()),
    "attention.py": ((148,), {"text_area"}, {"text_area:Sentence A"}),
    "forward.py": ((148,), {"text_input"}, {"text_input:Sentence A"}),
    "train.py": ((117, 117, 114), {"text_input", "number_input", "file_uploader"},
                 {"file_uploader:Upload a checkpoint (.zip)", "text_input:sentence with one [MASK]"}),
    "predict.py": ((148, 148), {"text_input", "text_area"}, {"text_input:Sentence", "text_area:Sentence A"}),
    "probes.py": ((1,), {"file_uploader"}, {"file_uploader:Labels CSV"}),
    "lens_patching.py": ((159,), {"text_input", "number_input"}, {"text_input:Text with [MASK]"}),
    "features.py": ((8,), {"number_input"}, set()),
    "compare.py": ((6,), {"number_input"}, set()),
    "lab.py": ((10, 10), {"text_input", "number_input"}, set()),
    "finetune.py": ((45, 45), {"text_input", "number_input", "file_uploader"},
                    {"text_input:sentence", "file_uploader:CSV: text,label or text_a,text_b,label"}),
}


@pytest.fixture(scope="module")
def fuzz_workspace(good_files, tmp_path_factory) -> tuple[str, str]:
    """(workspace id, its runs folder): made once per module (per pytest-xdist worker), opened by each page's test."""
    runs_dir = str(tmp_path_factory.mktemp("fuzz-runs"))
    with pytest.MonkeyPatch.context() as mp:  # a module fixture runs before the per-test runs folder is set
        mp.setenv("BERTCORE_RUNS_DIR", runs_dir)
        mp.setenv("BERTCORE_MAX_CORPUS_BYTES", str(LIMIT))
        yield _seed_workspace(good_files), runs_dir


def test_the_fuzz_covers_every_page_the_router_lists_and_over_1000_inputs():
    assert sorted(COVERAGE) == sorted(PAGES)
    assert sum(sum(floors) for floors, _, _ in COVERAGE.values()) + SIDEBAR[0] >= 1000
    assert set().union(*(kinds for _, kinds, _ in COVERAGE.values())) == set(FUZZ_KINDS)


# A long page's fuzz is cut in shares of the strings (AppFuzz ``part``), each a test of its own: COVERAGE's floors.
NEW_PAGE = ((0,), set(), set())  # a page not in COVERAGE yet: fuzzed whole (the coverage test asks for its row)
PAGES = _app_pages()
CASES = [(page, k) for page in PAGES for k in range(len(COVERAGE.get(page, NEW_PAGE)[0]))]


@pytest.mark.parametrize(("page", "share"), CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_every_input_of_the_page_takes_hostile_input(page, share, good_files, fuzz_workspace, monkeypatch, capsys):
    """One page, or one share of a long page's strings, per test (independent, so pytest-xdist spreads them): its
    inputs and the sidebar's filled with every hostile and generated string of the share; buttons clicked after
    each hostile one (the sidebar's on the first page only, as one whole-app fuzz would)."""
    floors, kinds, must = COVERAGE.get(page, NEW_PAGE)
    ws, runs_dir = fuzz_workspace
    monkeypatch.setenv("BERTCORE_RUNS_DIR", runs_dir)
    monkeypatch.setenv("BERTCORE_MAX_CORPUS_BYTES", str(LIMIT))
    monkeypatch.setattr(training_slots, "max_trainings", lambda: 0)  # every Start button: "Server busy", no training
    fuzz = AppFuzz(APP, good_files, LIMIT, ws=ws, click_sidebar=page == PAGES[0],
                   part=(share, len(floors)))
    path = next(p for p in fuzz.pages() if Path(p).name == page)  # the router's own entry for the file
    report = fuzz.run([path])
    with capsys.disabled():
        print(f"\napp-wide fuzz, {page}: {report.summary()}")
    assert not report.findings, f"{len(report.findings)} findings:\n" + "\n".join(report.findings[:40])
    own = [(kind_name, v) for scope, kind_name, v in report.inputs if scope == page]
    side = {name for scope, name, _ in report.inputs if scope == "sidebar"}
    assert len(own) >= floors[share], (page, len(own), report.summary())
    assert {name.split(":", 1)[0] for name, _ in own} >= kinds, report.by_kind
    assert must <= {name for name, _ in own}, (must, sorted({name for name, _ in own}))
    assert sum(1 for scope, _, _ in report.inputs if scope == "sidebar") >= SIDEBAR[0] // len(floors)
    assert SIDEBAR[1] <= side


BROKEN = {
    "unexpected": ("text = st.text_input('Anything', key='broken_text')\n"
                   "if '[MASK]' in text:\n"
                   "    raise ZeroDivisionError('a page bug the fuzz must find')\n"
                   "st.write(len(text))\n", "ZeroDivisionError"),
    "escaped": ("from bertcore.data.user_text import clean_text\n"
                "text = st.text_input('Anything', key='broken_text')\n"
                "st.write(clean_text(text, 'the broken text'))  # no user_action around a library call\n",
                "the broken text is empty"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_page_in_the_router_makes_the_fuzz_fail(case, tmp_path, monkeypatch, good_files):
    body, needle = BROKEN[case]
    page = tmp_path / "broken.py"
    page.write_text("import streamlit as st\n" + body, encoding="utf-8")
    real = streamlit.navigation

    def navigation(pages, **kw):  # app.py's router, with one more page registered (a page added later)
        return real({**pages, "Test": [streamlit.Page(str(page), title="Broken", url_path="broken")]}, **kw)

    monkeypatch.setattr(streamlit, "navigation", navigation)
    fuzz = AppFuzz(APP, good_files, LIMIT, texts=["", "plain words", FORMAT_ONLY, "[MASK]"], generated_per_page=0)
    assert str(page) in fuzz.pages()  # discovered from the router, not from a list in the test
    report = fuzz.run([str(page)])
    hits = [f for f in report.findings if f.startswith("broken.py") and needle in f]
    assert hits, report.findings
    assert all("'plain words'" not in f for f in hits)  # only the inputs that break it are reported


def test_a_page_without_any_guard_makes_the_fuzz_fail(tmp_path, good_files):
    """A router that does not use run_page: Streamlit's own exception element is caught too."""
    (tmp_path / "broken.py").write_text("import streamlit as st\n" + BROKEN["unexpected"][0], encoding="utf-8")
    router = tmp_path / "router.py"
    router.write_text("import streamlit as st\nst.navigation([st.Page('broken.py', title='Broken')]).run()\n",
                      encoding="utf-8")
    report = AppFuzz(router, good_files, LIMIT, texts=["fine", "[MASK]"], generated_per_page=0).run()
    assert any("exception element" in f and "'[MASK]'" in f for f in report.findings), report.findings
    assert not any("'fine'" in f for f in report.findings)


# ------------------------------------------------------------------ the case
def _fill_mask_bars(at) -> list:
    import json

    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return [f for f in figs if (f["layout"].get("title") or {}).get("text", "").startswith("[MASK] 1")]


def test_predict_invisible_sentence_a_shows_the_library_message_and_fill_mask_still_answers(caplog):
    from bertcore.analysis.inference import fill_mask
    from explorer.session.workspace import shared_untrained_bundle

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.switch_page("app_pages/predict.py").run()
    with caplog.at_level(logging.INFO, logger="explorer.page_errors"):
        at.text_area(key="pred_nsp_a").set_value(FORMAT_ONLY).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors == [e for e in errors if e.startswith("sentence A is empty")] and len(errors) == 1, errors
    assert UNEXPECTED not in " ".join(errors)
    assert not [m for m in at.metric if m.label == "P(IsNext)"]  # NSP is not asked with an empty A
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the rest of the page answers in the same run: fill-mask, checked against the library on the same model
    b = shared_untrained_bundle()
    want = fill_mask(b.model, b.tokenizer, at.text_area(key="pred_text").value, top_k=5).masks[0].candidates
    bars = _fill_mask_bars(at)
    assert len(bars) == 1 and list(bars[0]["data"][0]["y"]) == [t for t, _ in want]
    assert at.dataframe  # ... and the head-ablation table below it
    at.text_area(key="pred_nsp_a").set_value("Ben reads a book in the library.").run()
    assert not at.error and [m for m in at.metric if m.label == "P(IsNext)"]


def test_cli_nsp_refuses_invisible_sentence_a(tmp_path, good_files, capsys):
    from bertcore.cli import main

    with zipfile.ZipFile(io.BytesIO(good_files["zip"])) as zf:
        zf.extractall(tmp_path / "ck")
    assert main(["nsp", str(tmp_path / "ck"), FORMAT_ONLY, "it slept ."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sentence A is empty") and "Traceback" not in err


# ------------------------------------------------------------------ one rule, in the library
def _strip_tests(tree: ast.AST) -> list[int]:
    """Lines where a ``.strip()`` result is used as a truth value (``if x.strip()``, ``not x.strip()``, ...)."""
    def is_strip(n):
        return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "strip"

    tests = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            tests.append(n.test)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            tests.append(n.operand)
        elif isinstance(n, ast.BoolOp):
            tests += n.values
        elif isinstance(n, ast.comprehension):
            tests += n.ifs
    return sorted({t.lineno for t in tests if is_strip(t)})


def test_pages_leave_the_empty_rule_to_bertcore():
    """``str.strip()`` keeps zero-width and direction characters, so a page that asks it whether text is empty
    disagrees with bertcore (issue 27). Pages ask ``bertcore.data.user_text.is_blank`` or call the library."""
    files = sorted((ROOT / "app_pages").glob("*.py")) + sorted((ROOT / "explorer").glob("*.py"))
    bad = {str(p.relative_to(ROOT)): lines for p in files if (lines := _strip_tests(ast.parse(p.read_text())))}
    assert not bad, bad
    assert _strip_tests(ast.parse("if not a.strip():\n    pass\nx = [s for s in t if s.strip()]\n")) == [1, 3]
