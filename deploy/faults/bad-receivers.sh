#!/usr/bin/env bash
# Fault run: besides the good webhook receiver, three more endpoints of the
# same account always fail: one holds every request past the webhook timeout,
# one resets the connection, one answers 302 (redirects must not be
# followed). With a 1 s timeout and 1 s retry waits, the bad endpoints keep
# the retry tiers busy and get auto-disabled; the good receiver must still get
# every event exactly once, and its create→webhook p99 is reported
# (MAX_WEBHOOK_P99=2s makes it a pass/fail limit).
#
#   deploy/faults/bad-receivers.sh [extra podbench flags]
#   RATE=100 DURATION=20s deploy/faults/bad-receivers.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_shared_services
build
log "bad-receivers: ${RATE:-100}/s for ${DURATION:-20s} with timeout, reset and redirect endpoints"
podbench --rate "${RATE:-100}" --duration "${DURATION:-20s}" --warmup 1s \
  --bad-receivers timeout,reset,redirect --bad-timeout-sleep 5s \
  --podsvc-env POD_WEBHOOK_TIMEOUT=1s --podsvc-env POD_WEBHOOK_RETRY_DELAYS=1s,1s,1s,1s,1s,1s \
  --max-webhook-p99 "${MAX_WEBHOOK_P99:-0}" --drain-timeout "${DRAIN:-90s}" "$@"
