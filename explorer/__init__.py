"""Streamlit helpers of the BERT explorer: session state, the shared sidebar and pure figure builders."""
import os as _os

# numpy's OpenBLAS: one thread. In the server every session's script may call it at the same time (the
# Embeddings page's PCA), and OpenBLAS's spinning worker threads then starve each other on busy cores
# (docs/BENCH-HISTORY.md, "Classroom load test"). Must be set before numpy is first imported; app.py imports
# this package before anything that imports numpy.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
