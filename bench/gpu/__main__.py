"""``python -m bench.gpu``: the GPU bench (bench/gpu/__init__.py says what it measures)."""
import sys

from bench.gpu import main

sys.exit(main())
