package config

import (
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultsAreValid(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if !c.Embedded() || c.HTTPAddr != "127.0.0.1:8080" || len(c.Roles) != 5 {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if c.WebhookRetryDelays[5] != 12*time.Hour {
		t.Fatalf("last webhook delay = %s", c.WebhookRetryDelays[5])
	}
}

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"KAFKA_BROKERS":            "a:9092, b:9092",
		"POD_ROLES":                "api,projector",
		"POD_WEBHOOK_RETRY_DELAYS": "1s,2s,3s,4s,5s,6s",
		"POD_PUSH_RETRY_DELAYS":    "10ms,20ms,30ms",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Embedded() || len(c.KafkaBrokers) != 2 || c.KafkaBrokers[1] != "b:9092" {
		t.Fatalf("brokers: %v", c.KafkaBrokers)
	}
	if !c.HasRole("api") || c.HasRole("delivery") {
		t.Fatalf("roles: %v", c.Roles)
	}
	if c.WebhookRetryDelays[0] != time.Second || c.PushRetryDelays[2] != 30*time.Millisecond {
		t.Fatalf("delays: %v %v", c.WebhookRetryDelays, c.PushRetryDelays)
	}
}

func TestKafkaNaming(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Naming(); n.Topic("pod.order.events") != "pod.order.events" || n.Group("order-decider") != "order-decider" {
		t.Fatalf("default naming %+v is not the identity", n)
	}
	if c.KafkaReplication != 0 || c.KafkaRetention != 7*24*time.Hour || c.KafkaDLQRetention != 30*24*time.Hour || c.KafkaSessionTimeout != 10*time.Second {
		t.Fatalf("kafka defaults: %d %s %s %s", c.KafkaReplication, c.KafkaRetention, c.KafkaDLQRetention, c.KafkaSessionTimeout)
	}
	if r := c.RetryTierRetention(); r != 7*24*time.Hour+12*time.Hour {
		t.Fatalf("retry tier retention = %s", r)
	}
	c, err = FromEnv(env(map[string]string{
		"KAFKA_BROKERS":          "a:9092",
		"POD_KAFKA_TOPIC_PREFIX": "staging.",
		"POD_KAFKA_GROUP_PREFIX": "staging-",
		"POD_KAFKA_REPLICATION":  "2",
		"POD_KAFKA_RETENTION":    "48h",
	}))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Naming()
	if got := n.Topic("pod.order.events"); got != "staging.pod.order.events" {
		t.Fatalf("topic %q", got)
	}
	if got := n.DeadLetterTopic("order-decider"); got != "staging.pod.dlq.order-decider" {
		t.Fatalf("dead-letter topic %q", got)
	}
	if c, ok := n.DeadLetterConsumer("staging.pod.dlq.order-decider"); !ok || c != "order-decider" {
		t.Fatalf("dead-letter consumer %q %v", c, ok)
	}
	if _, ok := n.DeadLetterConsumer("pod.dlq.order-decider"); ok {
		t.Fatal("another environment's dead-letter topic taken for ours")
	}
	if got := n.Group("order-decider"); got != "staging-order-decider" || n.LogicalGroup(got) != "order-decider" {
		t.Fatalf("group %q", got)
	}
	if got := n.RetryTier(5); got != "staging.pod.webhook.deliveries.retry.12h" || n.LogicalTopic(got) != "pod.webhook.deliveries.retry.12h" {
		t.Fatalf("retry tier %q", got)
	}
	for _, topic := range n.AllTopics() {
		if !strings.HasPrefix(topic, "staging.pod.") {
			t.Fatalf("topic %q lacks the prefix", topic)
		}
	}
	if c.KafkaReplication != 2 || c.RetryTierRetention() != 60*time.Hour {
		t.Fatalf("replication %d, tier retention %s", c.KafkaReplication, c.RetryTierRetention())
	}
}

func TestInvalidSettingsAreAllReported(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"bad env", map[string]string{"POD_ENV": "staging"}, []string{"POD_ENV"}},
		{"bad role and number", map[string]string{"POD_ROLES": "api,cook", "POD_KAFKA_PARTITIONS": "x"}, []string{`unknown role "cook"`, "POD_KAFKA_PARTITIONS"}},
		{"wrong delay count", map[string]string{"POD_WEBHOOK_RETRY_DELAYS": "1s,2s"}, []string{"6 needed"}},
		{"bad duration", map[string]string{"POD_WEBHOOK_TIMEOUT": "ten"}, []string{"POD_WEBHOOK_TIMEOUT"}},
		{"production forbids allow list", map[string]string{"POD_ENV": "production", "POD_WEBHOOK_ALLOW_TARGETS": "127.0.0.1:9000"}, []string{"not allowed in production", "POD_PLATFORM_URL"}},
		{"bad allow target", map[string]string{"POD_WEBHOOK_ALLOW_TARGETS": "nohostport"}, []string{"not host:port"}},
		{"bad addr", map[string]string{"POD_HTTP_ADDR": "8080"}, []string{"POD_HTTP_ADDR"}},
		{"bad kafka prefixes", map[string]string{"POD_KAFKA_TOPIC_PREFIX": "dev/", "POD_KAFKA_GROUP_PREFIX": "a b"},
			[]string{"POD_KAFKA_TOPIC_PREFIX", "POD_KAFKA_GROUP_PREFIX"}},
		{"replication needs real kafka", map[string]string{"POD_KAFKA_REPLICATION": "3"}, []string{"needs KAFKA_BROKERS"}},
		{"bad replication and retention", map[string]string{"KAFKA_BROKERS": "a:9092", "POD_KAFKA_REPLICATION": "-1",
			"POD_KAFKA_RETENTION": "0s", "POD_KAFKA_DLQ_RETENTION": "week", "POD_KAFKA_SESSION_TIMEOUT": "500ms"},
			[]string{"POD_KAFKA_REPLICATION", "POD_KAFKA_RETENTION", "POD_KAFKA_DLQ_RETENTION", "POD_KAFKA_SESSION_TIMEOUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromEnv(env(tt.env))
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
