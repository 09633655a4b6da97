package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// visibility polls GET /v1/orders/pod/{id} for a sample of accepted orders,
// right after their 201, until each is visible, and records the time from
// the POST's send to the first 200. At most `workers` polls run at once: a
// sample that finds them all busy is skipped (and counted) rather than
// queued, so a poll never starts late and the polls never dominate the
// load. Because a 201 promises read-your-writes, a first GET that answers
// 404 is counted too.
type visibility struct {
	api   *api
	every int
	slots chan struct{}
	lat   latencies
	wg    sync.WaitGroup
	ctx   context.Context

	skipped  atomic.Int64
	failed   atomic.Int64 // never visible within the deadline, or an error status
	first404 atomic.Int64 // the first GET after the 201 did not find the order
}

const visibleDeadline = 10 * time.Second

func startVisibility(ctx context.Context, a *api, every, workers int) *visibility {
	return &visibility{api: a, every: max(1, every), slots: make(chan struct{}, max(1, workers)), ctx: ctx}
}

// offer submits the n-th accepted order; every k-th is polled.
func (v *visibility) offer(n int64, orderID string, sent time.Time) {
	if n%int64(v.every) != 0 || orderID == "" {
		return
	}
	select {
	case v.slots <- struct{}{}:
	default:
		v.skipped.Add(1)
		return
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		defer func() { <-v.slots }()
		v.poll(orderID, sent)
	}()
}

func (v *visibility) poll(orderID string, sent time.Time) {
	deadline := sent.Add(visibleDeadline)
	for i := 0; ; i++ {
		st, _, err := v.api.do(v.ctx, http.MethodGet, "/v1/orders/pod/"+orderID, nil)
		now := time.Now()
		switch {
		case err == nil && st == http.StatusOK:
			v.lat.add(now.Sub(sent))
			return
		case err == nil && st == http.StatusNotFound && i == 0:
			v.first404.Add(1)
		case err == nil && st != http.StatusNotFound && st != http.StatusServiceUnavailable && st != http.StatusTooManyRequests:
			v.failed.Add(1)
			return
		}
		if now.After(deadline) || v.ctx.Err() != nil {
			v.failed.Add(1)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop waits for the running polls to finish.
func (v *visibility) stop() { v.wg.Wait() }
