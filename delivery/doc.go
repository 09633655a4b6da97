// Package delivery is where webhook delivery lives: fan-out of order events
// to subscribed endpoints, the signed sender, the retry-tier topics, the URL
// guard and the Redis failure streaks (see ARCHITECTURE.md). Nothing is
// delivered yet: the webhook issue builds it on top of the order pipeline.
package delivery
