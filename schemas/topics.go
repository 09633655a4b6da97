package schemas

// Topic names. Every topic is created on start with the configured partition
// count (see internal/kafka.EnsureTopics).
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

// DeadLetterPrefix starts the name of every stage consumer's dead-letter
// topic.
const DeadLetterPrefix = "pod.dlq."

// DeadLetterPartitions is the partition count of dead-letter topics: one, so
// that a dead letter is named by its offset alone (podctl dlq replay
// --offset) and they read back in the order they were written.
const DeadLetterPartitions = 1

// DeadLetterTopic is the dead-letter topic of the stage consumer (group)
// named consumer: records it could not apply for a reason retrying will not
// fix go there, with the error in a header (see internal/stream). Every
// stage consumer's dead-letter topic is created on start with the others.
func DeadLetterTopic(consumer string) string { return DeadLetterPrefix + consumer }

// DeadLetterTopics lists the dead-letter topics of consumers.
func DeadLetterTopics(consumers ...string) []string {
	out := make([]string, len(consumers))
	for i, c := range consumers {
		out[i] = DeadLetterTopic(c)
	}
	return out
}

// WebhookRetryTiers are the retry topics, one per wait before attempts 2..7.
var WebhookRetryTiers = []string{
	"pod.webhook.deliveries.retry.1m",
	"pod.webhook.deliveries.retry.5m",
	"pod.webhook.deliveries.retry.30m",
	"pod.webhook.deliveries.retry.2h",
	"pod.webhook.deliveries.retry.6h",
	"pod.webhook.deliveries.retry.12h",
}

// AllTopics lists every topic the service uses except the stage consumers'
// dead-letter topics (DeadLetterTopics), which are created on start next to
// them with DeadLetterPartitions partitions.
func AllTopics() []string {
	ts := []string{
		TopicCatalogEvents, TopicOrderCommands, TopicOrderEvents, TopicFulfillmentUpdates,
		TopicWebhookCommands, TopicWebhookEvents, TopicWebhookDeliveries, TopicWebhookDLQ, TopicWebhookAttempts,
	}
	return append(ts, WebhookRetryTiers...)
}
