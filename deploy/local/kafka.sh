#!/usr/bin/env bash
# A real 3-node Apache Kafka cluster (KRaft, every node broker and controller) on
# loopback, for tests that need more than the embedded kfake broker: replication 3,
# min.insync.replicas 2, leader elections, nodes that die.
#
#   kafka.sh start            fetch Kafka once, format, start the 3 nodes, wait until
#                             every node serves metadata; prints one line on stdout:
#                             KAFKA_BROKERS=127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094
#   kafka.sh status           per node: running (pid) and serving; exit 0 only if all 3 serve
#   kafka.sh stop             TERM the nodes this script started (from their pidfiles),
#                             KILL those still alive after KAFKA_STOP_TIMEOUT seconds
#   kafka.sh stop-node N      the same for node N only
#   kafka.sh kill-node N      kill -9 node N (fault tests)
#   kafka.sh start-node N     start node N again and wait until it serves
#   kafka.sh brokers          print the KAFKA_BROKERS line (no check)
#
# Kafka's server and tools come from Maven Central (org.apache.kafka:kafka_2.13 and
# kafka-tools at KAFKA_VERSION, with their runtime dependencies and a log4j2 binding),
# fetched once with Maven into $KAFKA_DIST_DIR/<version>/libs; later starts reuse them.
# A JRE (17 or newer) and Maven are installed with apt-get when missing (as root).
#
# Environment:
#   KAFKA_BASE_PORT     first broker port (19092); brokers listen on BASE..BASE+2,
#                       controllers on BASE+100..BASE+102, all on 127.0.0.1
#   KAFKA_CLUSTER_DIR   data, configs, logs and pidfiles (var/kafka-cluster), node-N below it
#   KAFKA_DIST_DIR      cache of the fetched jars (var/kafka-dist)
#   KAFKA_VERSION       Kafka release to fetch (4.3.1)
#   KAFKA_HEAP          heap of each node (-Xms256m -Xmx512m)
#   KAFKA_JVM_OPTS      further JVM options of each node (-XX:TieredStopAtLevel=1)
#   KAFKA_START_TIMEOUT seconds to wait for the nodes to serve (90)
#   KAFKA_STOP_TIMEOUT  seconds to wait after TERM before KILL (30)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
# The log4j2 binding for Kafka's slf4j 1.7 API (Kafka 4.x logs through log4j2).
LOG4J_VERSION=${LOG4J_VERSION:-2.24.3}
KAFKA_BASE_PORT=${KAFKA_BASE_PORT:-19092}
KAFKA_CLUSTER_DIR=${KAFKA_CLUSTER_DIR:-$root/var/kafka-cluster}
KAFKA_DIST_DIR=${KAFKA_DIST_DIR:-$root/var/kafka-dist}
KAFKA_HEAP=${KAFKA_HEAP:--Xms256m -Xmx512m}
# C1 only: on a small shared machine the nodes start about twice as fast, and a test
# cluster does not need C2's peak throughput. Set KAFKA_JVM_OPTS= (empty) for the default JIT.
KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS--XX:TieredStopAtLevel=1}
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
KAFKA_STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
HOST=127.0.0.1
NODES="1 2 3"

dist="$KAFKA_DIST_DIR/$KAFKA_VERSION"
libs="$dist/libs"

say() { printf 'kafka: %s\n' "$*" >&2; }
die() { printf 'kafka: ERROR: %s\n' "$*" >&2; exit 1; }

broker_port() { echo $((KAFKA_BASE_PORT + $1 - 1)); }
controller_port() { echo $((KAFKA_BASE_PORT + 100 + $1 - 1)); }
node_dir() { echo "$KAFKA_CLUSTER_DIR/node-$1"; }
brokers() {
  local n out=
  for n in $NODES; do out="${out:+$out,}$HOST:$(broker_port "$n")"; done
  echo "$out"
}
print_brokers() { echo "KAFKA_BROKERS=$(brokers)"; }

# --- installing -------------------------------------------------------------

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=
apt_install() {
  can_install || die "$1 is not installed and this user cannot install it (need root with apt-get). Install $* yourself."
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    apt_updated=1
  fi
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1
}

ensure_java() {
  command -v java >/dev/null 2>&1 || apt_install default-jre-headless
  local major
  major=$(java_major)
  [ -n "$major" ] && [ "$major" -ge 17 ] || die "Kafka $KAFKA_VERSION needs Java 17 or newer; $(command -v java) is version ${major:-unknown}."
}

dist_ready() {
  [ -f "$libs/.complete" ] && ls "$libs"/kafka_2.13-"$KAFKA_VERSION".jar "$libs"/kafka-tools-"$KAFKA_VERSION".jar >/dev/null 2>&1
}

# Fetches Kafka's jars with Maven unless they are already in the cache.
ensure_dist() {
  dist_ready && return 0
  command -v mvn >/dev/null 2>&1 || apt_install maven
  mkdir -p "$dist"
  say "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $libs"
  # kafka-tools brings the admin and console tools (and the storage formatter's
  # dependencies); connect-runtime, which it pulls in for the Connect tools only, is
  # left out: it is large and none of the tools used here needs it.
  cat >"$dist/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/local/kafka.sh: the jars of a Kafka $KAFKA_VERSION node. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.pod</groupId>
  <artifactId>kafka-dist</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion>
          <groupId>org.apache.kafka</groupId>
          <artifactId>connect-runtime</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.6.1</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
  rm -rf "$libs.tmp"
  if ! mvn -q -B -Dstyle.color=never -f "$dist/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2; then
    rm -rf "$libs.tmp"
    die "Maven could not fetch Kafka $KAFKA_VERSION (see above); set KAFKA_VERSION to a release Maven Central serves."
  fi
  rm -rf "$libs"
  mv "$libs.tmp" "$libs"
  touch "$libs/.complete"
  dist_ready || die "Maven ran but $libs lacks kafka_2.13-$KAFKA_VERSION.jar or kafka-tools-$KAFKA_VERSION.jar"
  say "fetched $(ls "$libs"/*.jar | wc -l) jars"
}

# Log configuration of the command-line tools: warnings only, on stderr.
tools_log4j() {
  local f="$dist/tools-log4j2.properties"
  [ -f "$f" ] || cat >"$f" <<'EOF'
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = err
EOF
  echo "$f"
}

# Runs one of Kafka's tool classes with a small, quickly starting JVM.
kafka_tool() {
  java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$(tools_log4j)" -cp "$libs/*" "$@"
}

# --- configuration ------------------------------------------------------------

write_config() {
  local n=$1 d voters= m
  d=$(node_dir "$n")
  mkdir -p "$d/data" "$d/logs"
  for m in $NODES; do voters="${voters:+$voters,}$m@$HOST:$(controller_port "$m")"; done
  cat >"$d/server.properties" <<EOF
# Generated by deploy/local/kafka.sh at each start; edits are lost.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(broker_port "$n"),CONTROLLER://$HOST:$(controller_port "$n")
advertised.listeners=PLAINTEXT://$HOST:$(broker_port "$n")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$d/data

num.partitions=1
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
auto.create.topics.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=12
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0

# A small machine: few threads, short shutdown.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
controlled.shutdown.enable=true
EOF
  cat >"$d/log4j2.properties" <<EOF
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $d/logs/server.log
appender.file.filePattern = $d/logs/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

# One cluster id per cluster directory; each node's data directory is formatted
# with it once (meta.properties marks a formatted directory).
format_node() {
  local n=$1 d id
  d=$(node_dir "$n")
  [ -f "$d/data/meta.properties" ] && return 0
  if [ ! -s "$KAFKA_CLUSTER_DIR/cluster-id" ]; then
    kafka_tool kafka.tools.StorageTool random-uuid >"$KAFKA_CLUSTER_DIR/cluster-id.tmp"
    mv "$KAFKA_CLUSTER_DIR/cluster-id.tmp" "$KAFKA_CLUSTER_DIR/cluster-id"
  fi
  id=$(tr -d '[:space:]' <"$KAFKA_CLUSTER_DIR/cluster-id")
  say "formatting node $n (cluster id $id)"
  kafka_tool kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" >"$d/format.out" 2>&1 \
    || { cat "$d/format.out" >&2; die "formatting node $n failed"; }
}

# --- processes -----------------------------------------------------------------

# The pid of node N when its pidfile names a live kafka.Kafka process started with
# that node's configuration; nothing otherwise.
node_pid() {
  local d pid cmd
  d=$(node_dir "$1")
  [ -f "$d/kafka.pid" ] || return 0
  pid=$(tr -dc '0-9' <"$d/kafka.pid")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  case "$cmd" in
    *java*" kafka.Kafka $d/server.properties"*) echo "$pid" ;;
  esac
}

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

start_node_process() {
  local n=$1 d pid
  d=$(node_dir "$n")
  if [ -n "$(node_pid "$n")" ]; then return 0; fi
  rm -f "$d/kafka.pid"
  local p
  for p in "$(broker_port "$n")" "$(controller_port "$n")"; do
    port_busy "$p" && die "port $HOST:$p (node $n) is in use by another process; set KAFKA_BASE_PORT"
  done
  say "starting node $n (broker $HOST:$(broker_port "$n"), controller $HOST:$(controller_port "$n"))"
  # setsid: the node outlives this script and the caller's terminal or job group;
  # 9>&- keeps the cluster lock out of it.
  # shellcheck disable=SC2086
  setsid java $KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dkafka.logs.dir="$d/logs" \
    -Dlog4j2.configurationFile="$d/log4j2.properties" $KAFKA_JVM_OPTS \
    -cp "$libs/*" kafka.Kafka "$d/server.properties" \
    >"$d/logs/kafka.out" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$d/kafka.pid"
}

# The ids of the brokers in node N's metadata that answered an ApiVersions request,
# one per line; nothing when node N does not answer.
probe() {
  local out port cfg="$dist/probe.properties"
  port=$(broker_port "$1")
  # Not listening yet: no need to start a JVM (it would only wait for its timeouts).
  port_busy "$port" || return 0
  [ -f "$cfg" ] || printf '%s\n' request.timeout.ms=5000 default.api.timeout.ms=8000 \
    socket.connection.setup.timeout.ms=2000 socket.connection.setup.timeout.max.ms=2000 >"$cfg"
  out=$(timeout 20 java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$(tools_log4j)" -cp "$libs/*" \
    org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$HOST:$port" \
    --command-config "$cfg" 2>/dev/null) || true
  printf '%s\n' "$out" | sed -n 's/^[^ ]* (id: \([0-9]*\) .*-> ($/\1/p' | sort -n
}

# Node N serves when it answers metadata and lists itself as a live broker.
node_serves() { probe "$1" | grep -qx "$1"; }

show_log_tail() {
  local d
  d=$(node_dir "$1")
  say "--- node $1: last lines of $d/logs/server.log"
  tail -n 30 "$d/logs/server.log" >&2 2>/dev/null || true
  if [ -s "$d/logs/kafka.out" ]; then
    say "--- node $1: last lines of $d/logs/kafka.out"
    tail -n 15 "$d/logs/kafka.out" >&2 || true
  fi
}

# Waits until each of the given nodes answers metadata listing all of the nodes
# expected alive ($2, default all three).
wait_serving() {
  local want=$1 expect=${2:-$NODES} deadline n got pending
  deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  pending=$want
  while :; do
    local still=
    for n in $pending; do
      if [ -z "$(node_pid "$n")" ]; then
        say "node $n exited while starting"
        show_log_tail "$n"
        die "node $n did not start (the other nodes may still run: $0 stop)"
      fi
      got=$(probe "$n" | tr '\n' ' ')
      local e ok=1
      for e in $expect; do
        case " $got" in *" $e "*) ;; *) ok= ;; esac
      done
      if [ -n "$ok" ]; then say "node $n serves (brokers: ${got% })"; else still="$still $n"; fi
    done
    pending=${still# }
    [ -z "$pending" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      for n in $pending; do show_log_tail "$n"; done
      die "node(s) $pending did not serve metadata within ${KAFKA_START_TIMEOUT}s (still running; see the logs, stop with $0 stop)"
    fi
    sleep 2
  done
}

stop_nodes() {
  local sig=$1 n pid pids= deadline
  shift
  for n in "$@"; do
    pid=$(node_pid "$n")
    if [ -z "$pid" ]; then
      rm -f "$(node_dir "$n")/kafka.pid"
      continue
    fi
    say "node $n: kill -$sig $pid"
    kill "-$sig" "$pid" 2>/dev/null || true
    pids="$pids $n:$pid"
  done
  [ -n "$pids" ] || return 0
  deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  local entry
  for entry in $pids; do
    n=${entry%%:*} pid=${entry#*:}
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null && [ -n "$(node_pid "$n")" ]; then
      say "node $n: still running after ${KAFKA_STOP_TIMEOUT}s, kill -KILL $pid"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
    rm -f "$(node_dir "$n")/kafka.pid"
  done
}

lock() {
  mkdir -p "$KAFKA_CLUSTER_DIR"
  exec 9>"$KAFKA_CLUSTER_DIR/.lock"
  flock -w 300 9 || die "another kafka.sh holds $KAFKA_CLUSTER_DIR/.lock"
}

check_node_arg() {
  case "${1:-}" in 1|2|3) ;; *) die "usage: $0 ${2} N (N is 1, 2 or 3)" ;; esac
}

# --- commands ----------------------------------------------------------------------

cmd_start() {
  lock
  local n all_up=1
  for n in $NODES; do [ -n "$(node_pid "$n")" ] || all_up=; done
  if [ -n "$all_up" ] && dist_ready; then
    local serving=1
    for n in $NODES; do node_serves "$n" || serving=; done
    if [ -n "$serving" ]; then
      say "cluster already running and serving"
      print_brokers
      return 0
    fi
  fi
  ensure_java
  ensure_dist
  for n in $NODES; do
    [ -n "$(node_pid "$n")" ] && continue
    write_config "$n"
    format_node "$n"
  done
  for n in $NODES; do start_node_process "$n"; done
  say "waiting up to ${KAFKA_START_TIMEOUT}s for every node to serve metadata"
  wait_serving "$NODES"
  print_brokers
}

cmd_start_node() {
  check_node_arg "${1:-}" start-node
  lock
  ensure_java
  ensure_dist
  local n=$1
  if [ -z "$(node_pid "$n")" ]; then
    write_config "$n"
    format_node "$n"
    start_node_process "$n"
  fi
  # The node serves once it is back in its own metadata; the others may be down.
  wait_serving "$n" "$n"
}

cmd_status() {
  local n pid ok=0 ids
  for n in $NODES; do
    pid=$(node_pid "$n")
    if [ -z "$pid" ]; then
      echo "node $n: not running ($HOST:$(broker_port "$n"))"
      ok=1
      continue
    fi
    if dist_ready && ids=$(probe "$n") && printf '%s\n' "$ids" | grep -qx "$n"; then
      echo "node $n: running (pid $pid), serving on $HOST:$(broker_port "$n"), live brokers: $(echo $ids)"
    else
      echo "node $n: running (pid $pid), NOT serving on $HOST:$(broker_port "$n")"
      ok=1
    fi
  done
  return $ok
}

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|brokers
       $0 stop-node N|start-node N|kill-node N     (N = 1, 2 or 3)
EOF
  exit 2
}

case "${1:-}" in
  start) cmd_start ;;
  stop) lock; stop_nodes TERM $NODES; say "stopped" ;;
  status) cmd_status ;;
  brokers) print_brokers ;;
  start-node) cmd_start_node "${2:-}" ;;
  stop-node) check_node_arg "${2:-}" stop-node; lock; stop_nodes TERM "$2" ;;
  kill-node) check_node_arg "${2:-}" kill-node; lock; stop_nodes KILL "$2" ;;
  *) usage ;;
esac
