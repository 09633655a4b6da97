#!/usr/bin/env bash
# Fault run on the local 3-node Kafka cluster: in the middle of the load,
# kill -9 the broker that leads the most of the run's pod.order.commands
# partitions, start it again DOWN later. With replication 3 and
# min.insync.replicas 2 the other two keep every partition writable once
# leadership has moved: orders must still be accepted while the broker is
# down (any 5xx but 503 fails the run), and nothing accepted may be lost or
# delivered twice.
#
#   deploy/faults/kafka-broker-kill9.sh [extra podbench flags]
#   RATE=100 CLUSTER_DURATION=60s FAULT_AT=10s DOWN=15s deploy/faults/kafka-broker-kill9.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_shared_services
build
kafka_cluster
victim=$WORK/victim-node
# The fault command runs with the run's topic prefix in PODBENCH_KAFKA_PREFIX.
fault=$(write_cmd broker-kill \
  "topic=\${PODBENCH_KAFKA_PREFIX}pod.order.commands" \
  "n=\$(bash '$KAFKA_SH' top-leader \"\$topic\")" \
  "echo \"\$n\" >'$victim'" \
  "echo \"faults: kill -9 Kafka node \$n, leader of the most \$topic partitions\" >&2" \
  "bash '$KAFKA_SH' kill-node \"\$n\"")
recover=$(write_cmd broker-start "bash '$KAFKA_SH' start-node \"\$(cat '$victim')\"")
log "kafka-broker-kill9: ${RATE:-100}/s for ${CLUSTER_DURATION:-60s}, kill -9 the busiest commands leader at ${FAULT_AT:-10s}, restart it ${DOWN:-15s} later"
podbench --kafka-brokers "$KAFKA_BROKERS" --rate "${RATE:-100}" --duration "${CLUSTER_DURATION:-60s}" --warmup 2s \
  --fault-at "${FAULT_AT:-10s}" --fault-name "kill -9 of the Kafka node leading most pod.order.commands partitions, ${DOWN:-15s} down" \
  --fault-cmd "$fault" --fault-duration "${DOWN:-15s}" --recover-cmd "$recover" \
  --require-accepted-during-fault --require-accepted-after-fault --drain-timeout "${DRAIN:-120s}" "$@"
