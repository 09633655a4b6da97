#!/usr/bin/env bash
# Checks everything under deploy/ (run by `make lint`):
#   - Prometheus config and rules with promtool (check config, check rules, test rules);
#   - Kubernetes manifests, the compose file, Grafana dashboards and provisioning, and
#     the metric names they use, with the Go program in deploy/validate.
# promtool comes from PATH, else from a cache filled once from Debian's prometheus
# package (only the promtool binary is extracted: nothing is installed, no service
# starts), else it is built with the Go toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
PROMTOOL_GO_VERSION=${PROMTOOL_GO_VERSION:-v0.310.0}
cache=${POD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pod-tools}

find_promtool() {
	if [ -n "${PROMTOOL:-}" ]; then
		echo "$PROMTOOL"
		return
	fi
	if command -v promtool >/dev/null 2>&1; then
		command -v promtool
		return
	fi
	if [ -x "$cache/promtool" ]; then
		echo "$cache/promtool"
		return
	fi
	mkdir -p "$cache"
	if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
		tmp=$(mktemp -d)
		# apt-get download needs package lists; refresh them once when it finds none.
		if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
			if [ "$(id -u)" = 0 ]; then
				apt-get update -qq >/dev/null 2>&1 || true
			fi
			(cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || true
		fi
		deb=$(ls "$tmp"/prometheus_*.deb 2>/dev/null | head -n1 || true)
		if [ -n "$deb" ] && dpkg-deb -x "$deb" "$tmp/x" && [ -x "$tmp/x/usr/bin/promtool" ]; then
			cp "$tmp/x/usr/bin/promtool" "$cache/promtool.new"
			mv "$cache/promtool.new" "$cache/promtool"
			rm -rf "$tmp"
			echo "$cache/promtool"
			return
		fi
		rm -rf "$tmp"
	fi
	# Last resort: build promtool from the Prometheus module's source. (`go install
	# pkg@version` refuses modules with replace directives, as Prometheus has.)
	echo "deploy/lint.sh: promtool not found; building it with go (takes several minutes)" >&2
	src=$(cd "${TMPDIR:-/tmp}" && "$GO" mod download -json "github.com/prometheus/prometheus@$PROMTOOL_GO_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$src" ]; then
		echo "deploy/lint.sh: could not download github.com/prometheus/prometheus@$PROMTOOL_GO_VERSION" >&2
		exit 1
	fi
	(cd "$src" && GOWORK=off GOFLAGS=-buildvcs=false "$GO" build -o "$cache/promtool" ./cmd/promtool) >&2
	echo "$cache/promtool"
}

promtool=$(find_promtool)
echo "deploy: promtool ($("$promtool" --version 2>&1 | head -n1))"
"$promtool" check config deploy/prometheus/prometheus.yml
"$promtool" check rules deploy/prometheus/alerts.yml
"$promtool" test rules deploy/prometheus/alerts_test.yml

echo "deploy: go run ./deploy/validate"
out=$(gofmt -l deploy/validate)
if [ -n "$out" ]; then
	echo "gofmt needed:"
	echo "$out"
	exit 1
fi
"$GO" run ./deploy/validate
