package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// outcome is what became of one POST.
type outcome uint8

const (
	pending  outcome = iota
	accepted         // 201: the service owns the order
	rejected         // any other HTTP status: never accepted
	noAnswer         // the request may have reached the service, no answer came (reset, EOF, timeout)
	refused          // the connection was refused: the request never reached the service
)

// order is one POST: its reference, times and result.
type order struct {
	seq       int
	ref       string
	scheduled time.Time // open loop: the intended send time; closed loop: = sent
	sent      time.Time
	done      time.Time
	status    int
	outcome   outcome
	errText   string
	orderID   string
	recorded  bool // a 503 saying the request was recorded and will still be applied
	warmup    bool
	phase     phase
}

// latency is the POST latency: from the intended send time, so a stall
// delays every order scheduled behind it (no coordinated omission).
func (o *order) latency() time.Duration { return o.done.Sub(o.scheduled) }

const chunkSize = 4096

// ledger holds every order of the run; entries never move, so a worker
// writes its own entry without a lock. Readers look at entries only after
// the workers that wrote them are done.
type ledger struct {
	run    string // reference prefix of this run: "pb-<run>-<seq>"
	mu     sync.Mutex
	chunks [][]order
	n      int
}

func newLedger(run string) *ledger { return &ledger{run: run} }

// add appends an entry with the next sequence number and its reference.
func (l *ledger) add() *order {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n%chunkSize == 0 {
		l.chunks = append(l.chunks, make([]order, chunkSize))
	}
	o := &l.chunks[l.n/chunkSize][l.n%chunkSize]
	o.seq = l.n
	o.ref = l.prefix() + strconv.Itoa(l.n)
	l.n++
	return o
}

func (l *ledger) prefix() string { return "pb-" + l.run + "-" }

// seqOf parses a reference of this run; ok is false for anything else.
func (l *ledger) seqOf(ref string) (int, bool) {
	rest, ok := strings.CutPrefix(ref, l.prefix())
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// each calls f for every entry in sequence order.
func (l *ledger) each(f func(*order)) {
	l.mu.Lock()
	n, chunks := l.n, l.chunks
	l.mu.Unlock()
	for i := range n {
		f(&chunks[i/chunkSize][i%chunkSize])
	}
}

func (o outcome) String() string {
	switch o {
	case accepted:
		return "accepted"
	case rejected:
		return "rejected"
	case noAnswer:
		return "no_answer"
	case refused:
		return "refused"
	}
	return fmt.Sprintf("pending(%d)", uint8(o))
}
