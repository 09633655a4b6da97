package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/printpod/pod/internal/config"
)

// checkCompose loads deploy/compose/compose.yaml the way `docker compose` does
// (schema validation, interpolation with .env.example, merge keys, path
// resolution) and checks the podsvc and Kafka services. It returns the names
// of the podsvc services.
func (v *validator) checkCompose() []string {
	const rel = "deploy/compose/compose.yaml"
	dir := v.path("deploy", "compose")
	abs, err := filepath.Abs(dir)
	if err != nil {
		v.p.add(rel, "%v", err)
		return nil
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(abs, "compose.yaml")},
		cli.WithWorkingDirectory(abs),
		cli.WithEnvFiles(filepath.Join(abs, ".env.example")),
		cli.WithDotEnv,
	)
	if err != nil {
		v.p.add(rel, "%v", err)
		return nil
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		v.p.add(rel, "%v", err)
		return nil
	}
	v.composeServices = len(project.Services)

	bad := func(service, format string, args ...any) {
		v.p.add(rel, "service %s: "+format, append([]any{service}, args...)...)
	}
	env := func(s types.ServiceConfig, k string) string {
		if p := s.Environment[k]; p != nil {
			return *p
		}
		return ""
	}

	// Kafka: three KRaft nodes with replication 3 and min.insync.replicas 2.
	var kafka []string
	nodeIDs := map[string]bool{}
	for _, name := range sortedKeys(project.Services) {
		s := project.Services[name]
		if !strings.HasPrefix(s.Image, "apache/kafka:") {
			continue
		}
		kafka = append(kafka, name)
		id := env(s, "KAFKA_NODE_ID")
		if id == "" || nodeIDs[id] {
			bad(name, "KAFKA_NODE_ID %q is missing or not unique", id)
		}
		nodeIDs[id] = true
		for k, want := range map[string]string{
			"KAFKA_DEFAULT_REPLICATION_FACTOR": "3", "KAFKA_MIN_INSYNC_REPLICAS": "2",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
		} {
			if got := env(s, k); got != want {
				bad(name, "%s is %q, want %s", k, got, want)
			}
		}
		if !strings.Contains(env(s, "KAFKA_PROCESS_ROLES"), "broker") {
			bad(name, "KAFKA_PROCESS_ROLES %q has no broker role", env(s, "KAFKA_PROCESS_ROLES"))
		}
		if voters := strings.Split(env(s, "KAFKA_CONTROLLER_QUORUM_VOTERS"), ","); len(voters) != 3 {
			bad(name, "KAFKA_CONTROLLER_QUORUM_VOTERS names %d voters, want 3", len(voters))
		}
		if env(s, "CLUSTER_ID") == "" {
			bad(name, "CLUSTER_ID is not set")
		}
	}
	if len(kafka) != 3 {
		v.p.add(rel, "%d apache/kafka services (%v), want 3", len(kafka), kafka)
	}

	var podsvc []string
	roles := map[string]int{}
	for _, name := range sortedKeys(project.Services) {
		s := project.Services[name]
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			bad(name, "has no healthcheck")
		}
		for _, vol := range s.Volumes {
			if vol.Type == types.VolumeTypeBind {
				if _, err := os.Stat(vol.Source); err != nil {
					bad(name, "bind mount source %s does not exist", v.rel(vol.Source))
				}
			}
		}
		isPodsvc := strings.Contains(s.Image, "podsvc") || (s.Build != nil && strings.HasSuffix(s.Build.Dockerfile, "deploy/Dockerfile"))
		if !isPodsvc {
			continue
		}
		podsvc = append(podsvc, name)
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				bad(name, "build: %v", err)
			}
		}
		role := env(s, "POD_ROLES")
		if !slices.Contains(config.AllRoles, role) {
			bad(name, "POD_ROLES %q is not one role of %v", role, config.AllRoles)
		}
		replicas := 1
		if s.Deploy != nil && s.Deploy.Replicas != nil {
			replicas = *s.Deploy.Replicas
		}
		roles[role] += replicas
		if env(s, "POD_ENV") != "production" {
			bad(name, "POD_ENV is %q, want production", env(s, "POD_ENV"))
		}
		if env(s, "POD_HTTP_ADDR") != "0.0.0.0:8080" {
			bad(name, "POD_HTTP_ADDR is %q, want 0.0.0.0:8080", env(s, "POD_HTTP_ADDR"))
		}
		brokers := strings.Split(env(s, "KAFKA_BROKERS"), ",")
		var hosts []string
		for _, b := range brokers {
			host, _, err := net.SplitHostPort(strings.TrimSpace(b))
			if err != nil || !slices.Contains(kafka, host) {
				bad(name, "KAFKA_BROKERS entry %q is not host:port of a Kafka service", b)
			}
			hosts = append(hosts, host)
		}
		slices.Sort(hosts)
		if len(slices.Compact(hosts)) != 3 {
			bad(name, "KAFKA_BROKERS %q must name the 3 brokers", env(s, "KAFKA_BROKERS"))
		}
		for _, dep := range append(slices.Clone(kafka), "postgres", "redis") {
			if _, ok := s.DependsOn[dep]; !ok {
				bad(name, "does not depend on %s", dep)
			}
		}
		if s.HealthCheck != nil && !strings.Contains(strings.Join(s.HealthCheck.Test, " "), "/readyz") {
			bad(name, "healthcheck does not call /readyz")
		}
		envMap := map[string]string{}
		for k, p := range s.Environment {
			if p != nil {
				envMap[k] = *p
			}
		}
		v.checkPodsvcConfig(rel, "service "+name, envMap)
	}
	for _, r := range config.AllRoles {
		if roles[r] == 0 {
			v.p.add(rel, "no podsvc service runs role %q", r)
		}
	}
	if roles[config.RoleAPI] < 2 {
		v.p.add(rel, "the api role has %d instances, want at least 2", roles[config.RoleAPI])
	}
	if roles[config.RoleDelivery] < 2 {
		v.p.add(rel, "the delivery role has %d instances, want several", roles[config.RoleDelivery])
	}
	return podsvc
}
