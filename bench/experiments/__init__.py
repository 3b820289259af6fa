"""One-off studies that docs/BENCH.md cites, each runnable as ``python -m bench.experiments.<name>``
(``--help`` says what it measures). Nothing in the suite imports them."""
