#!/usr/bin/env bash
# Fault run on the local 3-node Kafka cluster: two podsvc processes on the
# same database, Redis and topics, each with every role (API, deciders,
# projectors, delivery), so each consumer group splits its partitions
# between them. POSTs go to both in turn. In the middle of the load the
# second is killed with kill -9: its groups rebalance onto the first, and
# again when it starts DOWN later. POSTs sent to the dead process get no
# answer (counted apart, neither accepted nor lost); every order accepted by
# either must reach the read model and its webhook exactly once, and no
# answer may be a 5xx other than 503.
#
#   deploy/faults/podsvc-rebalance.sh [extra podbench flags]
#   RATE=100 CLUSTER_DURATION=60s FAULT_AT=10s DOWN=10s deploy/faults/podsvc-rebalance.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_shared_services
build
kafka_cluster
log "podsvc-rebalance: ${RATE:-100}/s for ${CLUSTER_DURATION:-60s} over 2 podsvc processes, kill -9 the second at ${FAULT_AT:-10s}, restart it ${DOWN:-10s} later"
podbench --kafka-brokers "$KAFKA_BROKERS" --replicas 2 --rate "${RATE:-100}" --duration "${CLUSTER_DURATION:-60s}" --warmup 2s \
  --fault-at "${FAULT_AT:-10s}" --fault-kill9 --fault-duration "${DOWN:-10s}" \
  --require-accepted-during-fault --require-accepted-after-fault --drain-timeout "${DRAIN:-120s}" "$@"
