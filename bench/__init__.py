"""Benchmarks and the browser harness of the BERT explorer (not part of the library).

``python -m bench [--quick] [--json]`` runs them; ``bench.harness`` starts a headless app server and
chromium for the browser tests and the screenshot script.
"""
