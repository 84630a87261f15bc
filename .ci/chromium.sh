#!/usr/bin/env sh
# The browser tests (tests/it/browser.rs) drive headless Chromium. This installs
# it from Debian's packages when no Chromium is on the path (or $CHROMIUM set),
# and fails, saying so, where it cannot: a test that cannot run is not a pass.
set -eu
if [ -n "${CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
echo "chromium.sh: installing chromium from Debian's packages for the browser tests" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! command -v apt-get >/dev/null 2>&1 ||
  ! $SUDO apt-get update -qq ||
  ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; then
  echo "chromium.sh: could not install chromium; install it (or set CHROMIUM to a Chromium binary) and run again" >&2
  exit 1
fi
