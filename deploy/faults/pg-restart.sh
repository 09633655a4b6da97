#!/usr/bin/env bash
# Fault run: stop Postgres in the middle of the load for OUTAGE, start it
# again. The API must answer 503 while Postgres is away (any other 5xx fails
# the run), accept orders again after it is back, and lose nothing it
# accepted. By default a private Postgres cluster on a free port is used, so
# no one else's connections are cut (FAULT_SERVICES=shared stops the
# machine's own with pg_ctlcluster).
#
#   deploy/faults/pg-restart.sh [extra podbench flags]
#   RATE=100 DURATION=20s FAULT_AT=6s OUTAGE=3s deploy/faults/pg-restart.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build
if [ "$FAULT_SERVICES" = shared ]; then shared_pg; else private_pg; fi
redis-cli ping >/dev/null 2>&1 || die "Redis is not reachable on 127.0.0.1:6379 (bash deploy/local/services.sh)"
log "pg-restart: ${RATE:-100}/s for ${DURATION:-20s}, Postgres down at ${FAULT_AT:-6s} for ${OUTAGE:-3s}"
podbench --rate "${RATE:-100}" --duration "${DURATION:-20s}" --warmup 1s --database-url "$PG_URL" \
  --fault-at "${FAULT_AT:-6s}" --fault-name "Postgres stopped for ${OUTAGE:-3s}" --fault-cmd "$PG_STOP" --fault-duration "${OUTAGE:-3s}" --recover-cmd "$PG_START" \
  --require-accepted-after-fault --drain-timeout "${DRAIN:-90s}" "$@"
