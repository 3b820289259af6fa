#!/usr/bin/env bash
# Refresh the message catalogues after adding or changing a text in the app (explorer/i18n.py says how texts
# are marked): extract every tr()/ntr() message into locale/messages.pot, then merge it into each language's
# messages.po. New entries come with an empty translation; tests/test_i18n.py fails until they are filled.
set -euo pipefail
cd "$(dirname "$0")/.."
pybabel extract -F babel.cfg -k tr -k ntr:1,2 -k mark -k Message --no-location --sort-output --project "BERT explorer" --version 0.1.0 --copyright-holder "the BERT explorer developers" -o locale/messages.pot . 2>/dev/null
if [ ! -f locale/zh_Hans/LC_MESSAGES/messages.po ]; then
  pybabel init -i locale/messages.pot -d locale -l zh_Hans 2>/dev/null
fi
pybabel update -i locale/messages.pot -d locale -l zh_Hans --no-fuzzy-matching --ignore-obsolete 2>/dev/null
grep -c '^msgid ' locale/messages.pot | sed 's/^/messages: /'
