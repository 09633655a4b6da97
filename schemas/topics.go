package schemas

import "strings"

// Logical topic names. On the cluster each carries the deployment's topic
// prefix (Naming.Topic; empty by default). Every topic is created on start
// with the configured partition count, replication and retention (see
// internal/kafka.EnsureTopics and docs/kafka.md).
const (
	// TopicCatalogEvents carries store and product facts, keyed by store_id.
	TopicCatalogEvents = "pod.catalog.events"
	// TopicOrderCommands carries order commands, keyed by order_id.
	TopicOrderCommands = "pod.order.commands"
	// TopicOrderEvents carries the public order facts, keyed by order_id.
	TopicOrderEvents = "pod.order.events"
	// TopicFulfillmentUpdates carries production and carrier updates, keyed by order_id.
	TopicFulfillmentUpdates = "pod.fulfillment.updates"
	// TopicWebhookCommands carries webhook management commands, keyed by client (account) id.
	TopicWebhookCommands = "pod.webhook.commands"
	// TopicWebhookEvents carries webhook facts, keyed by client (account) id.
	TopicWebhookEvents = "pod.webhook.events"
	// TopicWebhookDeliveries carries first delivery attempts, keyed by webhook id.
	TopicWebhookDeliveries = "pod.webhook.deliveries"
	// TopicWebhookDLQ carries deliveries that failed their last attempt.
	TopicWebhookDLQ = "pod.webhook.deliveries.dlq"
	// TopicWebhookAttempts carries the result of every delivery attempt,
	// keyed by webhook id; the delivery log is built from it.
	TopicWebhookAttempts = "pod.webhook.attempts"
)

// DeadLetterPrefix starts the (logical) name of every stage consumer's
// dead-letter topic.
const DeadLetterPrefix = "pod.dlq."

// DeadLetterPartitions is the partition count of dead-letter topics: one, so
// that a dead letter is named by its offset alone (podctl dlq replay
// --offset) and they read back in the order they were written.
const DeadLetterPartitions = 1

// WebhookRetryTiers are the (logical) retry topics, one per wait before
// attempts 2..7.
var WebhookRetryTiers = []string{
	"pod.webhook.deliveries.retry.1m",
	"pod.webhook.deliveries.retry.5m",
	"pod.webhook.deliveries.retry.30m",
	"pod.webhook.deliveries.retry.2h",
	"pod.webhook.deliveries.retry.6h",
	"pod.webhook.deliveries.retry.12h",
}

// Naming turns the logical topic and consumer names above into the names
// one deployment uses on the Kafka cluster: every topic name starts with
// TopicPrefix and every consumer group id with GroupPrefix
// (POD_KAFKA_TOPIC_PREFIX, POD_KAFKA_GROUP_PREFIX), so several environments
// can share a cluster. The zero Naming is the embedded default: names as
// they are. It is built once from the configuration and handed to every
// component that talks to Kafka; no component writes a topic name any other
// way.
type Naming struct {
	TopicPrefix string
	GroupPrefix string
}

// Topic is the cluster name of the logical topic.
func (n Naming) Topic(logical string) string { return n.TopicPrefix + logical }

// Topics is Topic of each of logical.
func (n Naming) Topics(logical ...string) []string {
	out := make([]string, len(logical))
	for i, t := range logical {
		out[i] = n.Topic(t)
	}
	return out
}

// LogicalTopic is the logical name of a cluster topic name (the name
// without the prefix), e.g. for metric labels and switches on rec.Topic.
func (n Naming) LogicalTopic(topic string) string {
	s, _ := strings.CutPrefix(topic, n.TopicPrefix)
	return s
}

// Group is the consumer group id of the consumer named consumer.
func (n Naming) Group(consumer string) string { return n.GroupPrefix + consumer }

// LogicalGroup is the consumer name of a cluster group id.
func (n Naming) LogicalGroup(group string) string {
	s, _ := strings.CutPrefix(group, n.GroupPrefix)
	return s
}

// DeadLetterTopic is the dead-letter topic of the stage consumer named
// consumer (logically pod.dlq.<consumer>): records it could not apply for a
// reason retrying will not fix go there, with the error in a header (see
// internal/stream). Every stage consumer's dead-letter topic is created on
// start with the others.
func (n Naming) DeadLetterTopic(consumer string) string {
	return n.Topic(DeadLetterPrefix + consumer)
}

// DeadLetterTopics lists the dead-letter topics of consumers.
func (n Naming) DeadLetterTopics(consumers ...string) []string {
	out := make([]string, len(consumers))
	for i, c := range consumers {
		out[i] = n.DeadLetterTopic(c)
	}
	return out
}

// DeadLetterConsumer is the consumer whose dead-letter topic topic is, if it
// is one.
func (n Naming) DeadLetterConsumer(topic string) (string, bool) {
	return strings.CutPrefix(topic, n.Topic(DeadLetterPrefix))
}

// RetryTier is the cluster name of retry tier i (0 = the wait before the
// second attempt).
func (n Naming) RetryTier(i int) string { return n.Topic(WebhookRetryTiers[i]) }

// RetryTiers are the cluster names of every retry tier.
func (n Naming) RetryTiers() []string { return n.Topics(WebhookRetryTiers...) }

// AllTopics lists the cluster names of every topic the service uses except
// the stage consumers' dead-letter topics (DeadLetterTopics), which are
// created on start next to them with DeadLetterPartitions partitions.
func (n Naming) AllTopics() []string { return n.Topics(LogicalTopics()...) }

// LogicalTopics lists the logical names of every topic AllTopics lists.
func LogicalTopics() []string {
	ts := []string{
		TopicCatalogEvents, TopicOrderCommands, TopicOrderEvents, TopicFulfillmentUpdates,
		TopicWebhookCommands, TopicWebhookEvents, TopicWebhookDeliveries, TopicWebhookDLQ, TopicWebhookAttempts,
	}
	return append(ts, WebhookRetryTiers...)
}
