"""A training as a job: what to train (``RunSpec``), the route that runs it and keeps its run directory
(``service``), and the child process that hosts it for the app (``worker``).

This layer wires the others together: it builds the corpus and tokenizer (``bertcore.data``), the ``Trainer``
(``bertcore.training``) and the analyses that listen to it (``bertcore.analysis``). ``training`` never imports it.
"""
