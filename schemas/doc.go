// Package schemas holds the names that outlive any one release: Kafka topic
// names, event types and their Go shapes, the error codes of the public API,
// and the SQL migrations (embedded, applied on start).
//
// Names here are chosen once. Renaming a topic or an event type breaks
// consumers outside this repository; add new names instead.
package schemas
