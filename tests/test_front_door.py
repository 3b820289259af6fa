"""The package's front door: ``from bertcore import ...`` gives the names a notebook needs, lazily.

Each name is the very object its module defines (one owner per name: the front door only points to it), the
docstring of bertcore/__init__.py lists exactly ``__all__``, and importing bertcore stays light.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bertcore

ROOT = Path(__file__).resolve().parent.parent


def _defines(module_name: str, name: str) -> bool:
    """True when the module's own source binds ``name`` (def, class or assignment), not an import of it."""
    tree = ast.parse(Path(importlib.import_module(module_name).__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


@pytest.mark.parametrize("name", bertcore.__all__)
def test_each_name_is_its_modules_own(name):
    module = bertcore._FRONT_DOOR[name]
    value = getattr(bertcore, name)
    assert value is getattr(importlib.import_module(module), name)
    assert _defines(module, name), f"{module} does not define {name} itself"
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__ == module


def test_the_names_a_notebook_needs_are_there():
    need = {"BertConfig", "TrainConfig", "BertForPreTraining", "Trainer", "load_checkpoint", "fill_mask",
            "nsp_probability", "inspect_pair", "preset", "PRESETS", "builtin_corpus", "builtin_zh_corpus"}
    assert need <= set(bertcore.__all__)
    assert len(bertcore.__all__) == len(set(bertcore.__all__)) <= 25  # a front door, not a second namespace


def test_the_docstring_is_the_one_list():
    listed = set(re.findall(r"^    ([A-Za-z_][A-Za-z_0-9]*)\s{2,}", bertcore.__doc__, re.M))
    assert listed == set(bertcore.__all__)
    for name, module in bertcore._FRONT_DOOR.items():  # each line names the module that owns the name
        entry = re.search(rf"^    {name}\s.*?\(({'|'.join(re.escape(m) for m in set(bertcore._FRONT_DOOR.values()))})\)",
                          bertcore.__doc__, re.M | re.S)
        assert entry and entry.group(1) == module, name


def test_star_import_and_dir():
    ns: dict = {}
    exec("from bertcore import *", ns)
    assert set(bertcore.__all__) <= set(ns)
    assert set(bertcore.__all__) <= set(dir(bertcore))


def test_other_names_stay_in_their_modules():
    with pytest.raises(AttributeError, match="bertcore.analysis.lens"):
        bertcore.logit_lens  # noqa: B018
    from bertcore import cli  # a submodule still imports as before

    assert cli.main


def test_import_is_light_and_the_front_door_works_in_a_fresh_process(tmp_path):
    code = ("import sys, bertcore\n"
            "assert 'torch' not in sys.modules, 'import bertcore loaded torch'\n"
            "from bertcore import BertConfig, BertForPreTraining, Trainer, fill_mask\n"
            "m = BertForPreTraining(BertConfig(vocab_size=40))\n"
            "print(type(m).__module__, Trainer.__name__, fill_mask.__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["bertcore.model.bert", "Trainer", "bertcore.analysis.inference"]
