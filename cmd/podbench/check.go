package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// waiting reports whether an accepted order (or one answered 503
// "recorded") still lacks an expected webhook.
func waiting(o *order, rcv *receiver, expect string) bool {
	if o.outcome != accepted && !o.recorded {
		return false
	}
	got, ok := rcv.arrivalsOf(o.seq)
	if !ok || got.created.IsZero() {
		return true
	}
	return o.outcome == accepted && expect == "pushed" && got.terminal.IsZero()
}

// drain waits until every accepted order's expected webhooks arrived, or
// timeout; it shows what is still missing once a second.
func drain(ctx context.Context, led *ledger, rcv *receiver, expect string, timeout time.Duration) {
	start := time.Now()
	deadline := start.Add(timeout)
	lastSay := start
	lastMissing, since, named := -1, start, false
	for {
		missing := 0
		var stuck []*order
		led.each(func(o *order) {
			if waiting(o, rcv, expect) {
				missing++
				if len(stuck) < stuckShown {
					stuck = append(stuck, o)
				}
			}
		})
		if missing == 0 {
			say("drain: every accepted order's webhooks arrived (%s after the load)", time.Since(start).Round(time.Millisecond))
			return
		}
		now := time.Now()
		if now.After(deadline) {
			say("drain: gave up after %s; %d accepted orders still lack an expected webhook", timeout, missing)
			return
		}
		if now.Sub(lastSay) >= time.Second {
			fmt.Fprintf(os.Stderr, "[drain] %d accepted orders still waiting for webhooks (%s left)\n", missing, deadline.Sub(now).Round(time.Second))
			lastSay = now
		}
		if missing != lastMissing {
			lastMissing, since, named = missing, now, false
		}
		if !named && now.Sub(since) >= stuckAfter {
			nameStuck(os.Stderr, stuck, rcv, missing, now.Sub(since))
			named = true
		}
		if !sleepUntil(ctx, now.Add(200*time.Millisecond)) {
			return
		}
	}
}

// stuckShown is how many orders drain names when the count of orders it
// waits for stops falling for stuckAfter: an order whose webhooks stall
// (a job waiting out a lease, a delivery waiting out a retry) is then
// found by its id in podsvc's log and tables.
const (
	stuckShown = 10
	stuckAfter = 5 * time.Second
)

// nameStuck writes to w the orders drain waits for, with what each lacks.
func nameStuck(w io.Writer, stuck []*order, rcv *receiver, missing int, still time.Duration) {
	fmt.Fprintf(w, "[drain] %d orders got no expected webhook for %s; the first %d:\n", missing, still.Round(time.Second), len(stuck))
	for _, o := range stuck {
		lacks := "order.created"
		if got, ok := rcv.arrivalsOf(o.seq); ok && !got.created.IsZero() {
			lacks = "a SUCCESS or FAILED status update"
		}
		id := o.orderID
		if id == "" {
			id = "(answered 503, reference " + o.ref + ")"
		}
		fmt.Fprintf(w, "[drain]   order %s sent %s lacks %s\n", id, o.sent.UTC().Format("15:04:05.000"), lacks)
	}
}

// inReadModel returns which of ids the orders read model holds: one query
// per 5,000 ids on the orders table.
func inReadModelDB(ctx context.Context, dbURL string, ids []string) (map[string]bool, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	found := map[string]bool{}
	for i := 0; i < len(ids); i += 5000 {
		rows, err := conn.Query(ctx, `SELECT order_id::text FROM orders WHERE order_id = ANY($1::uuid[])`, ids[i:min(i+5000, len(ids))])
		if err != nil {
			return nil, err
		}
		var id string
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { found[id] = true; return nil }); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// inReadModelAPI pages GET /v1/orders/pod from just before the first send
// and returns the order ids it lists.
func inReadModelAPI(ctx context.Context, a *api, since time.Time) (map[string]bool, error) {
	found := map[string]bool{}
	cursor := ""
	for {
		q := url.Values{"from": {since.UTC().Format(time.RFC3339Nano)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Data []struct {
				OrderID string `json:"order_id"`
			} `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := a.call(ctx, "GET", "/v1/orders/pod?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		for _, o := range page.Data {
			found[o.OrderID] = true
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return found, nil
		}
		cursor = *page.NextCursor
	}
}

// verdict is the end check.
type verdict struct {
	Accepted              int     // 201s, warmup included
	MissingFromReadModel  int     // 201 but not in the read model
	MissingCreatedWebhook int     // 201 but order.created never arrived
	MissingPushedWebhook  int     // --expect pushed: no SUCCESS/FAILED status update arrived
	Lost                  int     // accepted orders missing from the read model or without order.created
	Duplicated            int     // event ids that arrived again after a 2xx, outside a crash window
	DuplicateDeliveries   int     // the extra arrivals of those
	RedeliveredAfterCrash int     // event ids the killed podsvc delivered (2xx) and the restarted one again
	RedeliveredWindowMs   float64 // the longest time before the kill one of those was first answered
	Unknown               int     // no answer (connection reset, timeout): outcome unknown
	UnknownCreated        int     // … of which order.created arrived anyway
	RejectedButCreated    int     // non-201 answers whose order.created arrived (e.g. a 503 after the decision wait)
	Recorded              int     // 503s saying the request was recorded and will still be applied
	RecordedNotApplied    int     // … of which order.created never arrived
	CheckedBy             string  // db or api
	CheckErr              string
	DupExamples           []string
	RedeliveredExamples   []string
}

// check decides lost and duplicated. present is the read model's answer
// (nil when it could not be read).
func check(led *ledger, rcv *receiver, present map[string]bool, expect string, crashes []crashSpan) verdict {
	var v verdict
	led.each(func(o *order) {
		got, ok := rcv.arrivalsOf(o.seq)
		created := ok && !got.created.IsZero()
		switch o.outcome {
		case accepted:
			v.Accepted++
			lost := false
			if present != nil && !present[o.orderID] {
				v.MissingFromReadModel++
				lost = true
			}
			if !created {
				v.MissingCreatedWebhook++
				lost = true
			}
			if expect == "pushed" && (!ok || got.terminal.IsZero()) {
				v.MissingPushedWebhook++
			}
			if lost {
				v.Lost++
			}
		case noAnswer, refused:
			v.Unknown++
			if created {
				v.UnknownCreated++
			}
		case rejected:
			if created {
				v.RejectedButCreated++
			}
			if o.recorded {
				v.Recorded++
				if !created {
					v.RecordedNotApplied++
				}
			}
		}
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for id, ev := range rcv.events {
		if len(ev.arrivals) < 2 {
			continue
		}
		first := ev.arrivals[0]
		if c, ok := crashBetween(crashes, first, ev.arrivals[len(ev.arrivals)-1]); ok {
			v.RedeliveredAfterCrash++
			v.RedeliveredWindowMs = max(v.RedeliveredWindowMs, float64(c.kill.Sub(first))/float64(time.Millisecond))
			if len(v.RedeliveredExamples) < 5 {
				when := c.kill.Sub(first).Round(time.Millisecond).String() + " before the kill"
				if first.After(c.kill) {
					when = first.Sub(c.kill).Round(time.Millisecond).String() + " after the kill (in flight)"
				}
				v.RedeliveredExamples = append(v.RedeliveredExamples, fmt.Sprintf("%s %s ×%d: first %s, again %s after the restart",
					id, ev.topic, len(ev.arrivals), when, ev.arrivals[len(ev.arrivals)-1].Sub(c.resume).Round(time.Millisecond)))
			}
			continue
		}
		v.Duplicated++
		v.DuplicateDeliveries += len(ev.arrivals) - 1
		if len(v.DupExamples) < 5 {
			v.DupExamples = append(v.DupExamples, fmt.Sprintf("%s %s ×%d, %s apart", id, ev.topic, len(ev.arrivals),
				ev.arrivals[1].Sub(first).Round(time.Millisecond)))
		}
	}
	return v
}

// crashBetween finds the crash that a repeat of an event first answered
// at a and last at b spans: the killed process sent the first (a is before
// the restart; it may be just after the kill, the request in flight) and
// another process (the restarted one, or a replica that took over) a
// later one, after the kill.
func crashBetween(crashes []crashSpan, a, b time.Time) (crashSpan, bool) {
	for _, c := range crashes {
		if (c.resume.IsZero() || a.Before(c.resume)) && b.After(c.kill) {
			return c, true
		}
	}
	return crashSpan{}, false
}
