"""docs/TENSORS.md lists every named tensor with the line that computes it; it must match the code."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_tensor_table_is_current():
    spec = importlib.util.spec_from_file_location("tensor_table", ROOT / "scripts" / "tensor_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.render()
    assert (ROOT / "docs" / "TENSORS.md").read_text(encoding="utf-8") == text, \
        "docs/TENSORS.md is stale: run python scripts/tensor_table.py"
    # every row's line holds the name's tap call
    for row in text.splitlines():
        if row.startswith("| `"):
            name = row.split("`")[1]
            path, line = row.rsplit("(", 1)[1].rstrip(") |").split(":")
            src = (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            assert name.split(".")[-1] in src and "tap" in src, (name, src)
