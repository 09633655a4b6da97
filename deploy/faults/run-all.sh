#!/usr/bin/env bash
# Runs every fault script in turn (binaries built once) and prints a summary.
# Exits non-zero when any run fails. Extra arguments go to every podbench.
# The Kafka faults run on the local 3-node cluster (deploy/local/kafka.sh),
# started once for all of them, and stopped at the end unless it was
# already running.
#
#   deploy/faults/run-all.sh
#   RATE=50 DURATION=15s deploy/faults/run-all.sh --json
#   FAULTS="kafka-broker-kill9 podsvc-rebalance" deploy/faults/run-all.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
all="kill9 pg-restart redis-stop bad-receivers replay kafka-broker-kill9 kafka-rolling-restart podsvc-rebalance"
faults=${FAULTS:-$all}
build
export PODBENCH_BIN PODSVC_BIN
case " $faults " in *" kafka-"* | *" podsvc-rebalance "*) kafka_cluster ;; esac
declare -A result
failed=0
for f in $faults; do
  [ -f "$FAULTS_DIR/$f.sh" ] || die "no fault run $f (known: $all)"
  log "=== $f"
  rc=0
  bash "$FAULTS_DIR/$f.sh" "$@" || rc=$?
  if [ "$rc" = 0 ]; then result[$f]=PASS; else result[$f]="FAIL (exit $rc)"; failed=1; fi
done
echo
echo "fault runs:"
for f in $faults; do
  printf '  %-22s %s\n' "$f" "${result[$f]}"
done
exit "$failed"
