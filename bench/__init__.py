"""Benchmarks of the BERT explorer (not part of the library), in three parts:

* the suite at this folder's root: ``python -m bench [--quick] [--json]`` (training speed against transformers,
  bench/training.py; the app's pages, bench/app.py; a user's first minutes, bench/user.py), and the GPU bench
  ``python -m bench.gpu`` (bench/gpu/);
* ``bench.harness``: a headless app server and chromium (and nginx in front of replicas) for the browser tests,
  the screenshot scripts and the load test;
* ``bench/experiments/``: one-off studies that docs/BENCH.md cites, each runnable as
  ``python -m bench.experiments.<name>``.
"""
