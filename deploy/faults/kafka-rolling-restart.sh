#!/usr/bin/env bash
# Fault run on the local 3-node Kafka cluster: a rolling restart of all three
# nodes under load (deploy/local/kafka.sh restart-rolling: each node stopped
# with a controlled shutdown, started again, and waited for until every
# partition is back in sync before the next). Orders must be accepted
# throughout (any 5xx but 503 fails the run) and nothing accepted may be
# lost or delivered twice.
#
#   deploy/faults/kafka-rolling-restart.sh [extra podbench flags]
#   RATE=100 CLUSTER_DURATION=240s FAULT_AT=10s deploy/faults/kafka-rolling-restart.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_shared_services
build
kafka_cluster
log "kafka-rolling-restart: ${RATE:-100}/s for ${CLUSTER_DURATION:-240s}, rolling restart of the 3 nodes from ${FAULT_AT:-10s}"
podbench --kafka-brokers "$KAFKA_BROKERS" --rate "${RATE:-100}" --duration "${CLUSTER_DURATION:-240s}" --warmup 2s \
  --fault-at "${FAULT_AT:-10s}" --fault-name "rolling restart of the 3 Kafka nodes" \
  --fault-cmd "bash '$KAFKA_SH' restart-rolling" \
  --require-accepted-during-fault --require-accepted-after-fault --drain-timeout "${DRAIN:-120s}" "$@"
