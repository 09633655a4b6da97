package stream

import (
	"testing"
	"time"
)

// TestABriefLingerWaitsOnlyForAStageThatIsBusy: the default linger waits
// for more records only while the stage took at least one per BriefLinger
// over its last window.
func TestABriefLingerWaitsOnlyForAStageThatIsBusy(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		perPoll int           // records each poll returns
		every   time.Duration // between polls
		for_    time.Duration // how long the stage works so
		idle    time.Duration // then nothing for this long
		busy    bool
	}{
		{"a stage taking 1,000 records a second lingers", 10, 10 * time.Millisecond, 3 * time.Second, 0, true},
		{"a stage taking 250 records a second lingers", 1, 4 * time.Millisecond, 3 * time.Second, 0, true},
		{"a stage taking 150 records a second does not linger", 3, 20 * time.Millisecond, 3 * time.Second, 0, false},
		{"a stage taking a record a second does not linger", 1, time.Second, 5 * time.Second, 0, false},
		{"a busy stage idle for ten seconds does not linger on its next record", 10, 10 * time.Millisecond, 3 * time.Second, 10 * time.Second, false},
		{"a stage that has not worked a second yet does not linger", 10, time.Millisecond, 500 * time.Millisecond, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a arrivals
			now := t0
			for ; now.Sub(t0) < tc.for_; now = now.Add(tc.every) {
				a.add(tc.perPoll, now)
			}
			now = now.Add(tc.idle)
			if got := a.busy(now); got != tc.busy {
				t.Fatalf("busy = %v, want %v (rate %.0f/s)", got, tc.busy, a.rate)
			}
		})
	}
}
