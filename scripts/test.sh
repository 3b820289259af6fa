#!/usr/bin/env bash
# The whole suite, as CI runs it (.ci/run, the README's test command): first every test that drives no browser, in
# two pytest-xdist workers (they are independent: each test has its own runs folder and ports); then the browser
# tests, alone and one at a time, since they time what chromium draws and share one app server. Measured in
# docs/TESTING.md. `python -m pytest` runs the same tests one at a time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
python -m pytest -n 2 -m "not browser"; first=$?
python -m pytest -m browser; second=$?  # run even when the first part failed: one report of everything
exit $(( first != 0 ? first : second ))
