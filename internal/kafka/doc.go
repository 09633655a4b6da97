// Package kafka holds the Kafka plumbing shared by every role: the embedded
// broker (kfake with on-disk persistence) used when no brokers are configured,
// client construction, topic creation and the broker address file that lets
// podctl reach a running podsvc's embedded broker.
package kafka
