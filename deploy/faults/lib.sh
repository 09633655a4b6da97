# shellcheck shell=bash
# Shared by the fault runs (sourced, not run): builds podbench and podsvc once,
# starts private Postgres/Redis instances when a fault needs to stop one,
# and cleans everything up on exit, whatever happens.
#
# Environment:
#   PODBENCH_BIN, PODSVC_BIN  prebuilt binaries (run-all.sh builds them once)
#   FAULT_SERVICES            private (default): faults that stop Postgres or Redis
#                             use throwaway instances on free ports, so nobody
#                             else's connections are cut; shared: stop the
#                             machine's own services (127.0.0.1:5432, :6379)
#   RATE, DURATION, FAULT_AT, OUTAGE   load and fault timing (each script has defaults)
#   CLUSTER_DURATION          load duration of the Kafka cluster faults, which need
#                             longer than the others (a node restarts in about 30 s)
set -euo pipefail

FAULTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$FAULTS_DIR/../.." && pwd)
FAULT_SERVICES=${FAULT_SERVICES:-private}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/podfault.XXXXXX")
chmod 755 "$WORK"

log() { printf 'faults: %s\n' "$*" >&2; }
die() { printf 'faults: ERROR: %s\n' "$*" >&2; exit 2; }

# Clean-up actions, run in reverse order on exit (also on ^C and errors).
CLEANUPS=()
on_cleanup() { CLEANUPS+=("$1"); }
run_cleanups() {
  local rc=$? i
  trap - EXIT INT TERM
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
    eval "${CLEANUPS[i]}" || log "clean-up step failed: ${CLEANUPS[i]}"
  done
  rm -rf "$WORK"
  exit "$rc"
}
trap run_cleanups EXIT
trap 'exit 130' INT TERM

# build makes PODBENCH_BIN and PODSVC_BIN point at binaries.
build() {
  if [ -z "${PODBENCH_BIN:-}" ]; then
    PODBENCH_BIN=$WORK/podbench
    log "building podbench"
    (cd "$REPO" && go build -o "$PODBENCH_BIN" ./cmd/podbench)
  fi
  if [ -z "${PODSVC_BIN:-}" ]; then
    PODSVC_BIN=$WORK/podsvc
    log "building podsvc"
    (cd "$REPO" && go build -o "$PODSVC_BIN" ./cmd/podsvc)
  fi
}

# podbench runs the load with the no-loss/no-dup check; its exit code is
# the script's.
podbench() {
  local rc=0
  "$PODBENCH_BIN" --podsvc-bin "$PODSVC_BIN" --baseline=false "$@" || rc=$?
  return "$rc"
}

# free_port prints a loopback TCP port nothing listens on.
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found"
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# write_cmd NAME BODY... writes an executable script $WORK/NAME.sh (what
# podbench's --fault-cmd and --recover-cmd then run) and prints its path.
write_cmd() {
  local f=$WORK/$1.sh
  shift
  { echo '#!/usr/bin/env bash'; echo 'set -euo pipefail'; printf '%s\n' "$@"; } >"$f"
  chmod +x "$f"
  echo "$f"
}

# private_pg starts a throwaway Postgres cluster and sets PG_URL, PG_STOP
# and PG_START (commands for podbench's --fault-cmd / --recover-cmd).
private_pg() {
  local bin dir port as=""
  bin=$(pg_bin)
  [ -n "$bin" ] && [ -x "$bin/initdb" ] || die "initdb not found under /usr/lib/postgresql/*/bin"
  dir=$WORK/pg
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
    as="runuser -u postgres --"
  fi
  port=$(free_port)
  $as "$bin/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
  PG_START=$(write_cmd pg-start "$as '$bin/pg_ctl' -D '$dir/data' -l '$dir/log' -w -t 60 -o '-p $port -k $dir -c listen_addresses=127.0.0.1' start >/dev/null")
  PG_STOP=$(write_cmd pg-stop "$as '$bin/pg_ctl' -D '$dir/data' -m fast -w stop >/dev/null")
  "$PG_START" || { cat "$dir/log" >&2; die "private Postgres did not start"; }
  on_cleanup "$as '$bin/pg_ctl' -D '$dir/data' -m immediate -w stop >/dev/null 2>&1 || true"
  PG_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  log "private Postgres on 127.0.0.1:$port ($dir)"
}

# shared_pg uses the machine's Postgres; the trap starts it again if a run
# leaves it stopped.
shared_pg() {
  local ver
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  PG_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/pod?sslmode=disable}
  PG_STOP=$(write_cmd pg-stop "pg_ctlcluster --skip-systemctl-redirect $ver main stop -m fast")
  PG_START=$(write_cmd pg-start "pg_ctlcluster --skip-systemctl-redirect $ver main start")
  on_cleanup "pg_isready -q -h 127.0.0.1 || '$PG_START'"
}

# private_redis starts a throwaway Redis and sets REDIS_URL_FAULT,
# REDIS_STOP and REDIS_START.
private_redis() {
  local port
  port=$(free_port)
  REDIS_START=$(write_cmd redis-start \
    "redis-server --daemonize yes --bind 127.0.0.1 --port $port --save '' --appendonly no --dir '$WORK' --pidfile '$WORK/redis.pid' --logfile '$WORK/redis.log'" \
    "for _ in \$(seq 1 50); do redis-cli -p $port ping >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1")
  REDIS_STOP=$(write_cmd redis-stop "redis-cli -p $port shutdown nosave")
  "$REDIS_START" || die "private Redis did not start"
  on_cleanup "redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true"
  REDIS_URL_FAULT="redis://127.0.0.1:$port/0"
  log "private Redis on 127.0.0.1:$port"
}

# shared_redis uses the machine's Redis; the trap starts it again if a run
# leaves it stopped.
shared_redis() {
  REDIS_URL_FAULT=${REDIS_URL:-redis://127.0.0.1:6379/0}
  REDIS_STOP=$(write_cmd redis-stop "redis-cli shutdown nosave")
  REDIS_START=$(write_cmd redis-start \
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log' \
    'for _ in $(seq 1 50); do redis-cli ping >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1')
  on_cleanup "redis-cli ping >/dev/null 2>&1 || '$REDIS_START'"
}

# The shared services must be up for runs that do not stop them.
require_shared_services() {
  pg_isready -q -h 127.0.0.1 || die "Postgres is not reachable on 127.0.0.1:5432 (bash deploy/local/services.sh)"
  redis-cli ping >/dev/null 2>&1 || die "Redis is not reachable on 127.0.0.1:6379 (bash deploy/local/services.sh)"
}

# kafka_cluster makes sure the local 3-node Kafka cluster (deploy/local/kafka.sh)
# runs and serves, and sets KAFKA_SH and KAFKA_BROKERS. A cluster this run
# started is stopped on exit; one that was already running is left running,
# with any node a failed run left down started again.
kafka_cluster() {
  local out
  KAFKA_SH=$REPO/deploy/local/kafka.sh
  # Someone's cluster when any node runs, serving or not: left running.
  out=$(bash "$KAFKA_SH" status 2>/dev/null || true)
  if grep -q 'running (pid' <<<"$out"; then
    log "using the running Kafka cluster"
    on_cleanup "bash '$KAFKA_SH' start >/dev/null"
  else
    log "starting the local Kafka cluster (deploy/local/kafka.sh start)"
    on_cleanup "bash '$KAFKA_SH' stop"
  fi
  out=$(bash "$KAFKA_SH" start) || die "the local Kafka cluster did not start (see above)"
  KAFKA_BROKERS=$(sed -n 's/^KAFKA_BROKERS=//p' <<<"$out")
  [ -n "$KAFKA_BROKERS" ] || die "deploy/local/kafka.sh start printed no KAFKA_BROKERS line"
  export KAFKA_SH KAFKA_BROKERS
  log "Kafka: $KAFKA_BROKERS"
}
