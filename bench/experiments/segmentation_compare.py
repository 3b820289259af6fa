"""Dev-time comparison of sentence splitters on tests/test_segmentation.py's texts (docs/SEGMENTATION.md).

    python -m bench.experiments.segmentation_compare

pysbd is not a dependency: install it by hand (`pip install pysbd`) to include it.
"""
from __future__ import annotations

import re

from bertcore.data.segmentation import split_sentences
from tests.test_segmentation import CASES

_OLD = re.compile(r"(?<=[.!?])[\"')\]]*\s+")  # the ASCII regex splitter this replaced


def old_regex(text: str) -> list[str]:
    return [s.strip() for s in _OLD.split(" ".join(text.split())) if s.strip()]


def pysbd_split(key: str, text: str) -> list[str]:
    import pysbd
    lang = {"zh-hant": "zh"}.get(key, key)
    return [s.strip() for s in pysbd.Segmenter(language=lang, clean=False).segment(text) if s.strip()]


def main() -> None:
    splitters = {"sentencex": lambda k, t: split_sentences(t), "old regex": lambda k, t: old_regex(t)}
    try:
        import pysbd  # noqa: F401
        splitters["pysbd"] = pysbd_split
    except ImportError:
        pass
    print("| text | " + " | ".join(splitters) + " |")
    print("|---|" + "---|" * len(splitters))
    for key, (text, want) in sorted(CASES.items()):
        cells = []
        for fn in splitters.values():
            got = fn(key, text)
            right = sum(s in want for s in got)
            cells.append(f"{right}/{len(want)}" + ("" if got == want else f" (gave {len(got)})"))
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
