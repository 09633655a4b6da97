#!/usr/bin/env bash
# Fault run: stop Redis in the middle of the load for OUTAGE, then start it
# again. Orders must keep flowing while Redis is away (Redis holds only
# counters: rate limits, soft-duplicate claims, failure streaks), and nothing
# accepted may be lost or delivered twice. By default a private Redis on a
# free port is used (FAULT_SERVICES=shared stops the machine's own).
#
#   deploy/faults/redis-stop.sh [extra podbench flags]
#   RATE=100 DURATION=20s FAULT_AT=6s OUTAGE=5s deploy/faults/redis-stop.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build
pg_isready -q -h 127.0.0.1 || die "Postgres is not reachable on 127.0.0.1:5432 (bash deploy/local/services.sh)"
if [ "$FAULT_SERVICES" = shared ]; then shared_redis; else private_redis; fi
log "redis-stop: ${RATE:-100}/s for ${DURATION:-20s}, Redis down at ${FAULT_AT:-6s} for ${OUTAGE:-5s}"
podbench --rate "${RATE:-100}" --duration "${DURATION:-20s}" --warmup 1s --redis-url "$REDIS_URL_FAULT" \
  --fault-at "${FAULT_AT:-6s}" --fault-name "Redis stopped for ${OUTAGE:-5s}" --fault-cmd "$REDIS_STOP" --fault-duration "${OUTAGE:-5s}" --recover-cmd "$REDIS_START" \
  --require-accepted-during-fault --require-accepted-after-fault --drain-timeout "${DRAIN:-90s}" "$@"
