#!/usr/bin/env bash
# Headless Chromium for the browser test (tests/ui/test_dagster_ui.py): Debian's `chromium` package,
# installed with apt-get when it is missing. Never fails the caller: where it cannot install (not root,
# no apt-get, no network) it says so, and the browser test skips with a message.
set -u
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    echo "browser test: using $(command -v "$name")"
    exit 0
  fi
done
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser test: chromium missing and cannot be installed here (needs root and apt-get);" \
       "run 'apt-get install -y chromium' as root, or the test is skipped" >&2
  exit 0
fi
echo "browser test: installing Debian's chromium (apt-get)"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
  echo "browser test: apt-get could not install chromium; the browser test will be skipped" >&2
fi
exit 0
