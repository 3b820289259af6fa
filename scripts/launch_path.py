"""Count what one press of Start on the Train page runs before the first ``Trainer.step``: every call of a project
function (bertcore, explorer) and every project class built, on both sides of the process boundary.

    python scripts/launch_path.py          # prints the counts and the lists docs/CONTRACT.md cites

The page side runs in AppTest (the Train page's own ``build_spec`` then ``launcher.start_run``); the child side
runs ``bertcore.launch.worker.child`` on the folder the page wrote, in this process, and stops at the first step.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROJECT = (str(ROOT / "bertcore"), str(ROOT / "explorer"), str(ROOT / "app_pages"))


class FirstStep(BaseException):
    """Raised when the child enters Trainer.step: the count ends there."""


def recorder(calls: collections.Counter, classes: collections.Counter, stop_at: str | None = None):
    built: dict[int, object] = {}  # a subclass's __init__ and its base's build one object (held: no id reuse)

    def prof(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        name = code.co_qualname if hasattr(code, "co_qualname") else code.co_name
        if code.co_name == "__init__":  # a class built (a dataclass's generated __init__ has no file of its own)
            me = frame.f_locals.get("self")
            mod = type(me).__module__ if me is not None else ""
            if mod.startswith(("bertcore", "explorer")) and id(me) not in built:
                built[id(me)] = me
                classes[f"{mod}.{type(me).__qualname__}"] += 1
        if not code.co_filename.startswith(PROJECT) or name.startswith("<"):
            return
        rel = Path(code.co_filename).relative_to(ROOT).with_suffix("")
        key = f"{'.'.join(rel.parts)}.{name}"
        calls[key] += 1
        if stop_at is not None and key == stop_at:
            way, f = [], frame
            while f is not None:  # the project functions on the stack: the way from the child's start to the step
                if f.f_code.co_filename.startswith(PROJECT):
                    way.append(getattr(f.f_code, "co_qualname", f.f_code.co_name))
                f = f.f_back
            raise FirstStep(" → ".join(reversed(way)))
    return prof


PAGE = """
import json, sys
import streamlit as st
sys.path.insert(0, {root!r})
from scripts.launch_path import recorder
import collections
from bertcore.config import BertConfig, TrainConfig
from explorer.launch import launcher
from explorer.session.workspace import shared_corpus_and_tokenizer
import app_pages.train as page
corpus, tok = shared_corpus_and_tokenizer()
bk = BertConfig(vocab_size=tok.vocab_size).to_dict()
tk = TrainConfig(steps=5, eval_every=0, snapshot_every=0).to_dict()
calls, classes = collections.Counter(), collections.Counter()
sys.setprofile(recorder(calls, classes))
spec, est, problem = page.build_spec(bk, tk, corpus, tok, name="count", preset="original BERT")
err = launcher.start_run([spec])
sys.setprofile(None)
run = launcher.get_run()
import shutil, tempfile
copy = tempfile.mkdtemp(prefix="launch-copy-")
shutil.copytree(run._folder, copy, dirs_exist_ok=True)  # the launch folder, before this page's child removes it
run.stop()
json.dump({{"calls": calls, "classes": classes, "err": err, "folder": copy}}, open({out!r}, "w"))
"""


def main() -> int:
    os.environ["BERTCORE_RUNS_DIR"] = tempfile.mkdtemp(prefix="launch-path-")
    os.environ["BERTCORE_TRAINING_PROCESS"] = "1"
    from streamlit.testing.v1 import AppTest

    out = Path(tempfile.mkdtemp()) / "page.json"
    AppTest.from_string(PAGE.format(root=str(ROOT), out=str(out)), default_timeout=120).run()
    page = json.loads(out.read_text())
    if page["err"]:
        print("error:", page["err"], file=sys.stderr)
        return 2
    # the child, on a copy of the launch folder the page wrote (the page's own child was stopped)
    from bertcore.launch import worker

    folder = Path(page["folder"])
    launch = json.loads((folder / worker.LAUNCH_FILE).read_text())
    (folder / worker.LAUNCH_FILE).write_text(json.dumps({**launch, "parent": tempfile.mkdtemp()}))
    calls, classes = collections.Counter(), collections.Counter()
    r, w = os.pipe()  # the child's stdin: open and silent (a closed one means "the server went away")
    sys.stdin = os.fdopen(r)
    sys.setprofile(recorder(calls, classes, stop_at="bertcore.training.trainer.Trainer.step"))
    way = "(no step)"
    try:
        worker.child(folder)
    except FirstStep as e:
        way = str(e)
    finally:
        sys.setprofile(None)
    for side, c, k in (("page (server process)", page["calls"], page["classes"]), ("child (training process)", calls,
                                                                                  classes)):
        print(f"## {side}: {sum(c.values())} calls of {len(c)} project functions, {sum(k.values())} project "
              f"objects of {len(k)} classes")
        print("classes:", ", ".join(f"{n.rsplit('.', 1)[-1]}×{v}" if v > 1 else n.rsplit(".", 1)[-1]
                                    for n, v in sorted(k.items())))
        if "-v" in sys.argv:
            print("calls:", ", ".join(f"{n}×{v}" if v > 1 else n for n, v in sorted(c.items())))
    print("the child's way to the first step:", way)
    both = collections.Counter(page["calls"]) + calls
    print("checks, both sides:", ", ".join(f"{n.rsplit('.', 1)[-1]}×{both[n]}" for n in (
        "bertcore.config.check_compatible", "bertcore.launch.service.check_budget")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
