package e2e

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/printpod/pod/internal/testenv"
)

// BenchmarkCreateOrder measures POST /v1/orders/pod end to end: HTTP,
// validation, the command log, the decider's transaction, the read model
// (the 201 waits for both), with every role running in-process.
//
//	go test -run '^$' -bench CreateOrder -benchtime 2000x ./internal/e2e/
func BenchmarkCreateOrder(b *testing.B) {
	d := startDemo(b, noPusher)
	v := d.variant(b, "ACTIVE", "tshirt")
	var n atomic.Int64
	run := func(c *testenv.Client) {
		raw, _ := json.Marshal(tshirtOrder(v.VariantID, fmt.Sprintf("bench-%d", n.Add(1)), 1))
		st, err := postJSON(c, "/v1/orders/pod", raw)
		if err != nil || st != 201 {
			b.Fatalf("create: %d %v", st, err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		c := testenv.NewClient(b, d.client.Base, d.cfg.DemoToken)
		for b.Loop() {
			run(c)
		}
	})
	b.Run("parallel16", func(b *testing.B) {
		b.SetParallelism(8) // 8 × GOMAXPROCS(2) = 16 clients
		b.RunParallel(func(pb *testing.PB) {
			c := testenv.NewClient(b, d.client.Base, d.cfg.DemoToken)
			for pb.Next() {
				run(c)
			}
		})
	})
}
