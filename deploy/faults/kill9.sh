#!/usr/bin/env bash
# Fault run: kill -9 podsvc in the middle of the load, start it again on the
# same data dir and database, keep loading, then check that every order
# answered 201 is in the read model and got its order.created webhook, and
# that no event id arrived twice. POSTs cut by the kill have no answer: they
# are counted as unknown, neither accepted nor lost. Events answered 2xx just
# before the kill and sent again after the restart (the at-least-once window
# docs/webhooks.md describes) are reported as redelivered_after_crash.
#
#   deploy/faults/kill9.sh [extra podbench flags, e.g. --json]
#   RATE=100 DURATION=20s FAULT_AT=8s DOWN=1s deploy/faults/kill9.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_shared_services
build
log "kill9: ${RATE:-100}/s for ${DURATION:-20s}, kill -9 at ${FAULT_AT:-8s}, restart ${DOWN:-1s} later"
podbench --rate "${RATE:-100}" --duration "${DURATION:-20s}" --warmup 1s \
  --fault-at "${FAULT_AT:-8s}" --fault-kill9 --fault-duration "${DOWN:-1s}" \
  --require-accepted-after-fault --drain-timeout "${DRAIN:-90s}" "$@"
