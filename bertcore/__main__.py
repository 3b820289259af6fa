"""``python -m bertcore`` and the installed ``bertcore`` command: the command-line interface (bertcore/cli/__init__.py,
``--help``). Both run ``run()`` below (pyproject.toml's ``[project.scripts]``)."""
import faulthandler
import os
import signal
import sys

from bertcore.cli import main


def run() -> int:
    """``main()`` with what a shell command needs around it; returns the exit status."""
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints where every thread of a stuck command is (stderr)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `python -m bertcore inspect ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        rc = 0
    return rc


if __name__ == "__main__":
    sys.exit(run())
