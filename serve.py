"""The explorer for a shared server: ``streamlit run serve.py`` (the same flags as ``streamlit run app.py``).

It is app.py behind the client gate (explorer/session/client_gate.py): a script that opens hundreds of sessions
from one address is turned away before Streamlit makes a session of each. On a personal machine
``streamlit run app.py`` is the same app without it. docs/LIMITS.md ("One client cannot starve the class").
"""
import streamlit as st
from starlette.middleware import Middleware

from explorer.session.client_gate import ClientGate

app = st.App("app.py", middleware=[Middleware(ClientGate)])
