"""The layering rules, checked by walking every import with ``ast`` (module-level and inside functions):

* bertcore (the library) imports nothing from the app (streamlit, explorer, app_pages) or the benchmarks (bench);
* bertcore's modules form no import cycle;
* no file of the project imports a private Streamlit module (``streamlit.runtime``, ``streamlit.web``, ...).
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


def test_the_walker_sees_real_imports(tmp_path):
    """The checks above would pass vacuously if the walker missed imports: prove it finds each kind."""
    imports = _imports(ROOT / "bertcore" / "analysis" / "inference.py")
    assert "bertcore.data.pretraining" in imports and "torch" in imports
    lazy = _imports(ROOT / "bertcore" / "cli.py")  # the CLI imports its commands' modules inside functions
    assert any(m.startswith("bertcore.training") for m in lazy)
    assert any(m.startswith("streamlit.") for p in (ROOT / "tests").glob("test_pages_*.py") for m in _imports(p))
