#!/usr/bin/env bash
# Fault run: rebuild both read models with podctl replay in the middle of the
# load. The rebuilds run beside the live read models and swap in while orders
# keep coming: every order sent must be accepted during the rebuilds, every
# GET podbench samples must find its order, and nothing accepted may be lost
# or delivered twice.
#
#   deploy/faults/replay.sh [extra podbench flags]
#   RATE=300 DURATION=30s FAULT_AT=10s deploy/faults/replay.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build
pg_isready -q -h 127.0.0.1 || die "Postgres is not reachable on 127.0.0.1:5432 (bash deploy/local/services.sh)"
PODCTL_BIN=${PODCTL_BIN:-$WORK/podctl}
if [ ! -x "$PODCTL_BIN" ]; then
  log "building podctl"
  (cd "$REPO" && go build -o "$PODCTL_BIN" ./cmd/podctl)
fi
# podbench hands the fault command the started podsvc's data dir and
# database; podctl finds the embedded broker through the data dir.
replay=$(write_cmd replay \
  'export POD_DATA_DIR=$PODBENCH_DATA_DIR DATABASE_URL=$PODBENCH_DATABASE_URL' \
  '[ -z "$PODBENCH_KAFKA_BROKERS" ] || export KAFKA_BROKERS=$PODBENCH_KAFKA_BROKERS POD_KAFKA_TOPIC_PREFIX=$PODBENCH_KAFKA_PREFIX POD_KAFKA_GROUP_PREFIX=$PODBENCH_KAFKA_PREFIX' \
  "\"$PODCTL_BIN\" replay --projection orders --quiet" \
  "\"$PODCTL_BIN\" replay --projection catalog --quiet")
log "replay: ${RATE:-300}/s for ${DURATION:-30s}, both read models rebuilt from ${FAULT_AT:-10s}"
podbench --rate "${RATE:-300}" --duration "${DURATION:-30s}" --warmup 1s --expect pushed \
  --fault-at "${FAULT_AT:-10s}" --fault-name "podctl replay of orders and catalog" --fault-cmd "$replay" \
  --require-accepted-during-fault --require-accepted-after-fault --drain-timeout "${DRAIN:-2m}" "$@"
