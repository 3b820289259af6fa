"""Load generator for the BERT explorer: simulated students over Streamlit's own websocket protocol.

No browser is involved. Each simulated student is one ``StreamlitTab`` (``loadgen.protocol``): it speaks
``/_stcore/stream`` with the protobuf messages shipped in the streamlit package, the way the frontend
does (``rerun_script`` back messages with a page script hash or page name and widget states; ``new_session``,
``delta``, ``script_finished`` and ``auto_rerun`` forward messages). ``loadgen.student`` scripts a class
visit through the pages, ``loadgen.runner`` runs many of them against one server and ``loadgen.report``
turns the measurements into the JSON and the table printed by ``scripts/loadtest.py``.

Only 127.0.0.1 is ever contacted, and every loop is bounded in count and in time. ``loadgen.flood`` is the
attacker beside the class: one client address (another loopback address as its source, e.g. 127.0.0.2) opening
many sessions and pressing Start in a loop.
"""
HOST = "127.0.0.1"
