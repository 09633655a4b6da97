#!/usr/bin/env bash
# Makes sure Debian's Chromium is at /usr/bin/chromium for the docs page's
# browser test (internal/e2e/docs_test.go). `make test` runs it. Idempotent:
# does nothing when Chromium is there; otherwise installs the `chromium`
# package with apt-get (as root, or through sudo), which takes about 20 s
# on this project's machines. No browser is downloaded from anywhere else.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
say() { printf 'chromium: %s\n' "$*" >&2; }
die() { printf 'chromium: ERROR: %s\n' "$*" >&2; exit 1; }

if [ -x "$CHROMIUM" ]; then
  exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
  die "$CHROMIUM is missing and there is no apt-get here: install Chromium so that $CHROMIUM exists"
if [ "$(id -u)" = 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  die "$CHROMIUM is missing and this user is not root and has no sudo: run, as root, apt-get update && apt-get install -y --no-install-recommends chromium"
fi

start=$(date +%s)
say "installing Debian's chromium package (apt-get)"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >/dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
[ -x "$CHROMIUM" ] || die "apt-get installed chromium, but $CHROMIUM is still missing"
say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium) in $(( $(date +%s) - start ))s"
