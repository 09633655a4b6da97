package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// progress prints one line a second on stderr while the load runs:
// accepted so far and in the last second, the POST p99 so far, webhook
// deliveries, requests in flight, failures, and the fault phase.
func progress(ctx context.Context, st *loadStats, rcv *receiver, faults *faultRun, warmEnd, end time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastAcc, lastDel int64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			acc, del := st.accepted.Load(), rcv.total.Load()
			secs := now.Sub(last).Seconds()
			clock := fmt.Sprintf("%5.0fs", now.Sub(warmEnd).Seconds())
			if now.Before(warmEnd) {
				clock = "warmup"
			}
			p99 := "    -  "
			if s := st.post.summary(); s.N > 0 {
				p99 = fmt.Sprintf("%6.1fms", s.P99)
			}
			tag := ""
			switch faults.phaseNow() {
			case phaseDuring:
				tag = "  FAULT"
			case phaseAfter:
				tag = "  recovered"
			}
			fmt.Fprintf(os.Stderr, "[%s] accepted %7d (%5.0f/s)  post p99 %s  webhooks %7d (%5.0f/s)  in flight %4d  non-201 %d  no answer %d%s\n",
				clock, acc, float64(acc-lastAcc)/secs, p99, del, float64(del-lastDel)/secs,
				st.inflight.Load(), st.other.Load(), st.noAnswer.Load(), tag)
			lastAcc, lastDel, last = acc, del, now
			if now.After(end.Add(time.Second)) && st.inflight.Load() == 0 {
				return
			}
		}
	}
}
