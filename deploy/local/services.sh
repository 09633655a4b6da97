#!/usr/bin/env bash
# Makes sure the local Postgres and Redis that `make run` and `make test` use
# are reachable: starts them when installed but stopped, installs them with
# apt-get when missing (as root), and otherwise stops with a precise message.
# It never lets the tests run without them.
#
# POD_SERVICES=external skips all of this, for setups whose Postgres and Redis
# live elsewhere (then point DATABASE_URL / REDIS_URL, and for the tests
# TEST_PG_ADMIN_URL / TEST_REDIS_URL, at them).
set -euo pipefail
if [ "${POD_SERVICES:-local}" = external ]; then
  echo "services: POD_SERVICES=external: not checking local Postgres and Redis" >&2
  exit 0
fi

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
DB_NAME=${POD_DB_NAME:-pod}

LOG_NAME=services
APT_HINT="or run them elsewhere and set POD_SERVICES=external with DATABASE_URL, REDIS_URL, TEST_PG_ADMIN_URL and TEST_REDIS_URL"
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pg_up() { pg_isready -q -h "$PGHOST" -p "$PGPORT" 2>/dev/null; }
pg_query() { psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -XAtq -c "$1"; }

pg_server_installed() { ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; }

ensure_postgres() {
  # pg_isready comes with the client package too; look for the server itself.
  if ! pg_up && ! pg_server_installed; then
    apt_install postgresql postgresql-contrib
  fi
  if ! pg_up; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
      local ver
      ver=$(ls /etc/postgresql | sort -V | tail -n 1)
      [ -n "$ver" ] || die "Postgres is installed but has no cluster in /etc/postgresql; create one with pg_createcluster."
      say "starting Postgres $ver"
      pg_ctlcluster --skip-systemctl-redirect "$ver" main start || die "Postgres $ver did not start; see /var/log/postgresql/postgresql-$ver-main.log"
    else
      die "Postgres is not reachable on $PGHOST:$PGPORT and no local cluster can be started here."
    fi
    for _ in $(seq 1 50); do pg_up && break; sleep 0.2; done
    pg_up || die "Postgres did not become ready on $PGHOST:$PGPORT"
  fi
  if ! pg_query 'select 1' >/dev/null 2>&1; then
    # A fresh Debian install asks for a password on loopback; the local
    # development setup trusts loopback connections instead.
    local hba
    hba=$(ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$hba" ] && [ -w "$hba" ]; then
      say "allowing trusted loopback connections in $hba"
      sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
      local ver
      ver=$(basename "$(dirname "$(dirname "$hba")")")
      pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
      sleep 0.5
    fi
    pg_query 'select 1' >/dev/null || die "cannot log in to Postgres on $PGHOST:$PGPORT as user postgres without a password; set DATABASE_URL to a working URL."
  fi
  # make test runs several services at once, each with an API pool and a
  # worker pool: Debian's default of 100 connections runs out.
  local maxconn
  maxconn=$(pg_query 'show max_connections')
  if [ "${maxconn:-0}" -lt 300 ] && command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    local ver
    ver=$(ls /etc/postgresql | sort -V | tail -n 1)
    say "raising Postgres max_connections from $maxconn to 300 (restart)"
    pg_query 'alter system set max_connections = 300' >/dev/null
    pg_ctlcluster --skip-systemctl-redirect "$ver" main restart || die "Postgres $ver did not restart; see /var/log/postgresql/postgresql-$ver-main.log"
    for _ in $(seq 1 50); do pg_up && break; sleep 0.2; done
    pg_up || die "Postgres did not become ready on $PGHOST:$PGPORT after the restart"
  fi
  if ! pg_query "select 1 from pg_available_extensions where name = 'pg_trgm'" | grep -q 1; then
    apt_install postgresql-contrib
  fi
  if ! pg_query "select 1 from pg_database where datname = '$DB_NAME'" | grep -q 1; then
    say "creating database $DB_NAME"
    pg_query "create database \"$DB_NAME\"" >/dev/null
  fi
  say "Postgres ready on $PGHOST:$PGPORT"
}

redis_up() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

ensure_redis() {
  command -v redis-cli >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 || apt_install redis-server redis-tools
  if ! redis_up; then
    say "starting Redis on $REDIS_HOST:$REDIS_PORT"
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/pod.log || die "redis-server did not start; see /var/log/redis/pod.log"
    for _ in $(seq 1 50); do redis_up && break; sleep 0.1; done
    redis_up || die "Redis did not become ready on $REDIS_HOST:$REDIS_PORT"
  fi
  say "Redis ready on $REDIS_HOST:$REDIS_PORT"
}

command -v psql >/dev/null 2>&1 || apt_install postgresql-client
ensure_postgres
ensure_redis
