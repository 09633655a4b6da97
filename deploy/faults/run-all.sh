#!/usr/bin/env bash
# Runs every fault script in turn (binaries built once) and prints a summary.
# Exits non-zero when any run fails. Extra arguments go to every podbench.
#
#   deploy/faults/run-all.sh
#   RATE=50 DURATION=15s deploy/faults/run-all.sh --json
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build
export PODBENCH_BIN PODSVC_BIN
declare -A result
failed=0
for f in kill9 pg-restart redis-stop bad-receivers; do
  log "=== $f"
  rc=0
  bash "$FAULTS_DIR/$f.sh" "$@" || rc=$?
  if [ "$rc" = 0 ]; then result[$f]=PASS; else result[$f]="FAIL (exit $rc)"; failed=1; fi
done
echo
echo "fault runs:"
for f in kill9 pg-restart redis-stop bad-receivers; do
  printf '  %-14s %s\n' "$f" "${result[$f]}"
done
exit "$failed"
