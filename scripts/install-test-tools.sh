#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: the Python packages and,
# for the browser tests, Debian's chromium (Playwright cannot download its own browser here).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
# fonts-wqy-microhei: a CJK font (4 MB) so chromium draws the 简体中文 pages and Chinese tokens, and their SVG/PNG
# exports, with real glyphs instead of boxes (the app itself never fetches a font).
# nginx: the replica test runs two app processes behind deploy/nginx-class.conf (started by the test itself, in
# the foreground on free ports; the package's own service is not used).
need=""
[ -x /usr/bin/chromium ] || need="$need chromium"
fc-list :lang=zh 2>/dev/null | grep -q . || need="$need fonts-wqy-microhei"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need="$need nginx"
if [ -n "$need" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
