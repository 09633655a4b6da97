package app

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaMetrics gives a client its id and kprom hooks registered on the app's
// registry; each client has its own hooks (kprom unregisters them on close).
func (a *App) kafkaMetrics(clientID string) []kgo.Opt {
	m := kprom.NewMetrics("pod_kafka", kprom.Registerer(a.Registry), kprom.WithClientLabel())
	return []kgo.Opt{kgo.ClientID(clientID), kgo.WithHooks(m)}
}
