"""``python -m bertcore``: the command-line interface (see bertcore/cli.py and ``--help``)."""
import faulthandler
import os
import signal
import sys

from bertcore.cli import main

if __name__ == "__main__":
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints where every thread of a stuck command is (stderr)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `python -m bertcore inspect ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        rc = 0
    sys.exit(rc)
