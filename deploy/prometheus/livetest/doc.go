// Package livetest proves the operator signals on a live Prometheus: the
// alert rules of deploy/prometheus/alerts.yml and the dashboards of
// deploy/grafana/dashboards, evaluated by a real Prometheus server
// (Debian's package, installed by deploy/local/prometheus.sh) that scrapes
// a real podsvc process under podbench load. It holds only its test,
// TestSignalsOnALivePrometheus, which `make test` runs with the server's
// path in POD_TEST_PROMETHEUS; elsewhere the test looks for `prometheus` on
// PATH and fails, saying how to install it, when there is none.
//
// Each run is a fresh stack (database, data directory, embedded broker,
// Redis prefix, Prometheus with an empty data directory):
//
//   - a healthy run: every panel query of every dashboard returns data,
//     except those on a written list of queries empty for a stated reason;
//     every rule loads healthy; no alert is ever pending or firing; every
//     metric the dashboards and alerts use exists on /metrics from start;
//     docs/metrics.md lists exactly the metrics podsvc serves;
//   - faulted runs (a stopped consumer, a dead webhook endpoint beside a
//     flaky one, a poison record, a webhook secret no configured key
//     opens): exactly the alerts meant for the fault fire, each with its
//     runbook link, and nothing critical fires for an endpoint's trouble.
//
// Prometheus is given the scrape shape of deploy/prometheus/prometheus.yml
// (the file itself, with static targets in place of DNS discovery and 1 s
// intervals) and a copy of alerts.yml whose for: durations, and only those,
// are shortened (minutes read as seconds) so alerts fire within the test;
// the expressions are the real ones, evaluated with no history before the
// run.
package livetest
