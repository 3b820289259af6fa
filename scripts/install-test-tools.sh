#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: the Python packages and,
# for the browser tests, Debian's chromium (Playwright cannot download its own browser here).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
# fonts-wqy-microhei: a CJK font (4 MB) so chromium draws the 简体中文 pages and Chinese tokens, and their SVG/PNG
# exports, with real glyphs instead of boxes (the app itself never fetches a font).
if [ ! -x /usr/bin/chromium ] || ! fc-list :lang=zh 2>/dev/null | grep -q .; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null
fi
