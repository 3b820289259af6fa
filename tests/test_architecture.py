"""The layering rules, checked by walking every import with ``ast`` (module-level and inside functions):

* bertcore (the library) imports nothing from the app (streamlit, explorer, app_pages) or the benchmarks (bench);
* bertcore's modules form no import cycle;
* no file of the project imports a private Streamlit module (``streamlit.runtime``, ``streamlit.web``, ...);
* app.py and the page scripts, which Streamlit runs again at every page run, define no Streamlit cache.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_STREAMLIT = ("streamlit", "streamlit.testing.v1", "streamlit.components.v1", "streamlit.proto")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Every module named by an import statement in ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out += [f"{mod}.{a.name}" for a in node.names]  # `from pkg import module`
    return out


def _project_files() -> list[Path]:
    skip = {".git", ".venv", "node_modules"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_bertcore_imports_no_app_and_no_bench():
    bad = []
    for path in (ROOT / "bertcore").rglob("*.py"):
        for mod in _imports(path):
            top = mod.split(".")[0]
            if top in ("streamlit", "explorer", "bench", "app_pages", "app"):
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not bad, bad


def test_bertcore_has_no_import_cycle():
    modules = {_module_name(p): p for p in (ROOT / "bertcore").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for mod in _imports(path):
            if mod in modules and mod != name:
                deps.add(mod)
        # importing a package runs its __init__: count it as an edge only when that __init__ imports something
        graph[name] = deps
    cycles = []
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_no_private_streamlit_import():
    bad = []
    for path in _project_files():
        for mod in _imports(path):
            if mod.startswith("streamlit.") and not mod.startswith(PUBLIC_STREAMLIT):
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not bad, bad


def _cache_decorators(path: Path) -> list[str]:
    """The ``st.cache_data`` / ``st.cache_resource`` decorators (called or not) of the functions in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Attribute) and target.attr in ("cache_data", "cache_resource"):
                    out.append(f"{path.name}:{node.lineno} {node.name}")
    return out


def test_scripts_run_at_every_page_run_define_no_cache(tmp_path):
    """A cache decorator runs again at every run of the script that holds it, and Streamlit then reads and
    tokenizes the function's source to key it (explorer/session/page_caches.py): caches live in modules."""
    scripts = [ROOT / "app.py", ROOT / "serve.py", *sorted((ROOT / "app_pages").glob("*.py"))]
    assert len(scripts) >= 16
    bad = [hit for path in scripts for hit in _cache_decorators(path)]
    assert not bad, bad
    probe = tmp_path / "page.py"
    probe.write_text("import streamlit as st\n@st.cache_resource(show_spinner=False)\ndef a():\n    return 1\n"
                     "@st.cache_data\ndef b():\n    return 2\n")
    assert _cache_decorators(probe) == ["page.py:3 a", "page.py:6 b"]


def test_the_walker_sees_real_imports(tmp_path):
    """The checks above would pass vacuously if the walker missed imports: prove it finds each kind."""
    imports = _imports(ROOT / "bertcore" / "analysis" / "inference.py")
    assert "bertcore.data.pretraining" in imports and "torch" in imports
    lazy = _imports(ROOT / "bertcore" / "cli" / "train.py")  # the CLI imports its commands' modules inside functions
    assert any(m.startswith(("bertcore.training", "bertcore.launch")) for m in lazy)
    assert any(m.startswith("streamlit.") for p in (ROOT / "tests").glob("test_pages_*.py") for m in _imports(p))


# ---------------------------------------------------------------------------------------------- one owner per name
PROJECT = ("bertcore", "explorer", "app_pages", "bench", "loadgen", "scripts")
# Where a function-level import of a project module is allowed, and why: the CLI keeps torch (and everything that
# imports it) lazy so `python -m bertcore --help` answers at once; bench and loadgen scripts load what one
# benchmark needs.
DEFERRED_IMPORTS_ALLOWED = ("bertcore/cli", "bertcore/__main__.py", "bench/", "loadgen/", "scripts/")


def _code_files():
    return [p for p in _project_files() if p.relative_to(ROOT).parts[0] in PROJECT or p.name == "app.py"]


def _top_level_nodes(tree):
    return [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))] + [
        n for t in tree.body if isinstance(t, (ast.If, ast.Try)) for n in ast.walk(t)
        if isinstance(n, (ast.Import, ast.ImportFrom))]


def _is_project(mod: str) -> bool:
    return mod.split(".")[0] in PROJECT


def test_no_import_of_another_modules_underscore_name():
    bad = []
    for path in _code_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and _is_project(node.module):
                bad += [f"{path.relative_to(ROOT)}: from {node.module} import {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad


def test_no_reexport_lists():
    """A module does not import names only to hand them on (`# noqa: F401 re-exported`, `__all__` of imports)."""
    bad = []
    for path in _code_files():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        imported = {a.asname or a.name for n in _top_level_nodes(tree) if isinstance(n, ast.ImportFrom)
                    and n.module and _is_project(n.module) for a in n.names}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                names = {getattr(e, "value", None) for e in getattr(node.value, "elts", [])}
                if names & imported:
                    bad.append(f"{path.relative_to(ROOT)}: __all__ lists imported names {sorted(names & imported)}")
        lines = text.splitlines()
        for node in _top_level_nodes(tree):
            if isinstance(node, ast.ImportFrom) and node.module and _is_project(node.module):
                seg = " ".join(lines[node.lineno - 1:node.end_lineno]).lower()
                if "re-export" in seg or "reexport" in seg:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} re-exports from {node.module}")
    assert not bad, bad


def test_io_does_not_import_training():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in (ROOT / "bertcore" / "io").rglob("*.py")
           for m in _imports(p) if m.startswith(("bertcore.training", "bertcore.finetune"))]
    assert not bad, bad


def test_project_modules_are_imported_at_the_top():
    """Imports of project modules inside functions only where DEFERRED_IMPORTS_ALLOWED says why."""
    bad = []
    for path in _code_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(DEFERRED_IMPORTS_ALLOWED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set(map(id, _top_level_nodes(tree)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [f"{rel}:{node.lineno} imports {m} inside a function" for m in mods if _is_project(m)]
    assert not bad, bad


def test_the_new_rules_can_fail(tmp_path, monkeypatch):
    """Each rule above finds its violation in a file written to break it."""
    pkg = tmp_path / "bertcore" / "io"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from bertcore.training.runs import _pid_alive  # noqa: F401 - re-exported\n"
                                "def f():\n    from bertcore.errors import InputError\n    return InputError\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    for rule in (test_no_import_of_another_modules_underscore_name, test_no_reexport_lists,
                 test_io_does_not_import_training, test_project_modules_are_imported_at_the_top):
        try:
            rule()
        except AssertionError:
            continue
        raise AssertionError(f"{rule.__name__} passed on a file that breaks it")


# ---------------------------------------------------------------------------------------------- bertcore's layers
# Lowest first; a module imports only its own layer and the ones below (lazily too). The launch layer wires the
# others together (the pretraining route, the training process); the trainer only trains, and what a run records
# besides its curve (bertcore.analysis.records) listens through its callbacks.
LAYERS = (
    ("errors", "message", "settings", "config", "presets"),
    ("data", "model"),
    ("io",),
    ("training",),
    ("analysis",),
    ("finetune",),
    ("lab",),
    ("launch",),
    ("cli", "__main__", "__init__"),
)


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "bertcore":
        return None
    head = parts[1] if len(parts) > 1 else "__init__"
    is_module = (ROOT / "bertcore" / head).is_dir() or (ROOT / "bertcore" / f"{head}.py").is_file()
    if head != "__init__" and not is_module:
        return None  # `import bertcore` / `from bertcore import __version__`: the package itself, imported by all
    if head.startswith("cli"):
        head = "cli"
    for rank, names in enumerate(LAYERS):
        if head in names:
            return rank
    raise AssertionError(f"{module}: add its package to LAYERS in tests/test_architecture.py")


def test_bertcore_imports_only_its_own_layer_and_below():
    bad = []
    for path in (ROOT / "bertcore").rglob("*.py"):
        mine = _layer(_module_name(path))
        for mod in _imports(path):
            theirs = _layer(mod) if mod.startswith("bertcore.") else None
            if theirs is not None and theirs > mine:
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not bad, bad


def test_the_layer_check_sees_an_upward_import():
    """The trainer importing an analysis would be caught: the rule is not vacuous."""
    assert _layer("bertcore.training.trainer") < _layer("bertcore.analysis.records") < _layer("bertcore.launch.service")
    assert _layer("bertcore.io.checkpoint") < _layer("bertcore.training.runs")
    assert _layer("bertcore.cli.heads") == _layer("bertcore.__main__") == len(LAYERS) - 1


# ---------------------------------------------------------------------------------------------- explorer's layers
# Lowest first, as for bertcore. Figure builders are pure (numbers in, plotly dicts out); the session keeps a
# browser's state; launch starts and watches background work; parts draw widgets from all of them; the live chart
# is a component that shows a part's figures. Pages (app_pages/) sit above everything and are not checked here.
EXPLORER_LAYERS = (
    ("__init__", "i18n"),
    ("page_errors",),
    ("figures",),
    ("export",),
    ("session",),
    ("launch", "server_process"),
    ("parts",),
    ("livechart",),
)


def _explorer_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "explorer":
        return None
    head = parts[1] if len(parts) > 1 else "__init__"
    if head != "__init__" and not ((ROOT / "explorer" / head).is_dir() or (ROOT / "explorer" / f"{head}.py").is_file()):
        return None
    for rank, names in enumerate(EXPLORER_LAYERS):
        if head in names:
            return rank
    raise AssertionError(f"{module}: add its package to EXPLORER_LAYERS in tests/test_architecture.py")


def _upward(module: str, imports: list[str]) -> list[str]:
    mine = _explorer_layer(module)
    return [m for m in imports if (theirs := _explorer_layer(m)) is not None and theirs > mine]


def test_explorer_imports_only_its_own_layer_and_below():
    """No arrow runs up; so no two folders of explorer import each other either."""
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in (ROOT / "explorer").rglob("*.py")
           for m in _upward(_module_name(p), _imports(p))]
    assert not bad


def test_explorer_folders_do_not_import_each_other():
    pairs = set()
    for path in (ROOT / "explorer").rglob("*.py"):
        me = _module_name(path).split(".")[1:2] or ["__init__"]
        for mod in _imports(path):
            p = mod.split(".")
            if p[0] == "explorer" and len(p) > 1 and _explorer_layer(mod) is not None and p[1] != me[0]:
                pairs.add((me[0], p[1]))
    assert not {(a, b) for a, b in pairs if (b, a) in pairs}


def test_the_explorer_layer_check_sees_an_upward_import():
    """A session module importing a page part, or a figure builder importing the session, would be caught."""
    assert _explorer_layer("explorer.session.state") < _explorer_layer("explorer.launch.launcher") \
        < _explorer_layer("explorer.parts.run_status")
    assert _upward("explorer.session.state", ["explorer.parts.run_status", "explorer.i18n"]) == \
        ["explorer.parts.run_status"]
    assert _upward("explorer.figures.train", ["explorer.session.memo"]) == ["explorer.session.memo"]
    assert _upward("explorer.parts.sidebar", ["explorer.launch.launcher", "bertcore.config"]) == []


def test_figure_builders_never_import_streamlit():
    """explorer.figures is pure: what draws widgets lives in explorer.parts."""
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in (ROOT / "explorer" / "figures").rglob("*.py")
           for m in _imports(p) if m.split(".")[0] == "streamlit"]
    assert not bad
