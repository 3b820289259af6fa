"""app.py behind the client gate: ``streamlit run serve.py`` (the same flags as ``streamlit run app.py``).

A script that opens hundreds of sessions from one address is turned away before Streamlit makes a session of each
(explorer/session/client_gate.py): what a shared server starts (deploy/, docs/CLASSROOM.md, docs/REPLICAS.md); a
personal machine can keep ``streamlit run app.py``. The class alone is as fast under either (docs/BENCH-HISTORY.md,
"The client flood beside the class of 100"); the caps: docs/LIMITS.md.
"""
import streamlit as st
from starlette.middleware import Middleware

from explorer.session.client_gate import ClientGate

app = st.App("app.py", middleware=[Middleware(ClientGate)])
