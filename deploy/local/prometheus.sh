#!/usr/bin/env bash
# Makes sure a Prometheus server binary is on this machine for the live test of
# the alert rules and dashboards (deploy/prometheus/livetest), and prints its
# path on stdout. `make test` runs it and hands the path to the test.
#
# Looks for, in order: POD_PROMETHEUS (a binary of your own), `prometheus` on
# PATH, /usr/bin/prometheus. When none is there, installs Debian's
# `prometheus` package with apt-get (as root; without recommended packages,
# so no node exporter comes with it). Only the binary is used: the test starts
# its own server with a configuration and data directory of its own, on a free
# port. If the package started Debian's own Prometheus service, the script
# stops and disables it again, so nothing keeps running on :9090. A
# Prometheus that was installed before is left as it is.
set -euo pipefail

LOG_NAME=prometheus
APT_HINT="or point POD_PROMETHEUS at a prometheus binary (2.x or 3.x)"
# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

find_prometheus() {
  if [ -n "${POD_PROMETHEUS:-}" ]; then
    [ -x "$POD_PROMETHEUS" ] || die "POD_PROMETHEUS=$POD_PROMETHEUS is not an executable file"
    echo "$POD_PROMETHEUS"
  elif command -v prometheus >/dev/null 2>&1; then
    command -v prometheus
  elif [ -x /usr/bin/prometheus ]; then
    echo /usr/bin/prometheus
  else
    return 1
  fi
}

# stop_packaged_service stops the service the package may have started (on a
# machine whose init system starts services on install) and keeps it from
# starting at boot.
stop_packaged_service() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    if systemctl is-enabled --quiet prometheus.service 2>/dev/null || systemctl is-active --quiet prometheus.service 2>/dev/null; then
      say "stopping and disabling Debian's prometheus service (the test runs its own server)"
      systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
  fi
  if [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
    say "stopping Debian's prometheus service (the test runs its own server)"
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1 && [ -e /etc/init.d/prometheus ]; then
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
}

if bin=$(find_prometheus); then
  echo "$bin"
  exit 0
fi

start=$(date +%s)
apt_install prometheus --no-install-recommends
stop_packaged_service
bin=$(find_prometheus) || die "apt-get installed prometheus, but no prometheus binary is on PATH or at /usr/bin/prometheus"
say "installed $("$bin" --version 2>&1 | head -n1) in $(($(date +%s) - start))s"
echo "$bin"
