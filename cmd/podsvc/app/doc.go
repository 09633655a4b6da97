// Package app is podsvc's composition root, the top of the house: the one
// package that imports every layer. It assembles podsvc from its configuration: Postgres (migrated),
// Redis, Kafka (embedded or external, topics created), the demo data, and the
// roles the process runs. Start returns once every role is running; Stop
// shuts down in order: the API stops taking requests and finishes those in
// flight, consumers finish their batch and commit, producers flush, the
// embedded broker syncs to disk.
package app
