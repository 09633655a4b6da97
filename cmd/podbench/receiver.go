package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// followedPath is where the redirecting bad receiver points; a request
// there means the service followed a redirect, which it must not.
const followedPath = "/followed-redirect"

// receiver is the good webhook endpoint: it verifies each request's
// signature (docs/webhooks.md), answers 204 at once and records, per event
// id, every arrival. The first arrival of an event is the one that counts;
// any later arrival of an id that was already answered 2xx is a duplicate.
type receiver struct {
	led    *ledger
	secret atomic.Pointer[string] // set once the webhook is registered
	srv    *http.Server
	addr   string // host:port listened on
	url    string

	total       atomic.Int64 // verified requests, duplicates included
	badSig      atomic.Int64
	stale       atomic.Int64
	undecodable atomic.Int64
	idMismatch  atomic.Int64
	followed    atomic.Int64

	mu      sync.Mutex
	events  map[string]*eventSeen
	orders  map[int]*orderSeen // by the ledger's sequence number
	foreign int                // events of orders not from this run
	byTopic map[string]int     // distinct events per topic
}

// eventSeen is one event id as the receiver saw it.
type eventSeen struct {
	topic    string
	seq      int // -1 when the order is not from this run
	arrivals []time.Time
}

// orderSeen is what arrived for one order of this run.
type orderSeen struct {
	orderID  string
	created  time.Time // first order.created arrival
	terminal time.Time // first status update to SUCCESS or FAILED
}

type envelope struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	Data  struct {
		Order struct {
			ID           string  `json:"id"`
			ReferenceID  string  `json:"reference_id"`
			ClientStatus *string `json:"client_status"`
		} `json:"order"`
	} `json:"data"`
}

// newReceiver is a receiver of led's orders that has seen nothing yet and
// listens nowhere.
func newReceiver(led *ledger) *receiver {
	return &receiver{led: led, events: map[string]*eventSeen{}, orders: map[int]*orderSeen{}, byTopic: map[string]int{}}
}

func startReceiver(addr string, led *ledger) (*receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := newReceiver(led)
	r.addr = ln.Addr().String()
	r.url = "http://" + r.addr + "/hooks/podbench"
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	if req.URL.Path == followedPath {
		r.followed.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	secret := r.secret.Load()
	if secret == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	ts := req.Header.Get("X-Webhook-Timestamp")
	if !validSignature(*secret, ts, body, req.Header.Get("X-Webhook-Signature")) {
		r.badSig.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 300*time.Second {
		r.stale.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var ev envelope
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		r.undecodable.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if req.Header.Get("X-Webhook-Id") != ev.ID {
		r.idMismatch.Add(1)
	}
	r.record(ev, now)
	r.total.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// validSignature checks X-Webhook-Signature: "sha256=" + hex(HMAC-SHA256(
// secret, timestamp + "." + raw body)), compared in constant time.
func validSignature(secret, ts string, body []byte, got string) bool {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(got))
}

func (r *receiver) record(ev envelope, at time.Time) {
	seq, ours := r.led.seqOf(ev.Data.Order.ReferenceID)
	if !ours {
		seq = -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.events[ev.ID]
	if seen != nil {
		seen.arrivals = append(seen.arrivals, at)
		return
	}
	r.events[ev.ID] = &eventSeen{topic: ev.Topic, seq: seq, arrivals: []time.Time{at}}
	r.byTopic[ev.Topic]++
	if !ours {
		r.foreign++
		return
	}
	o := r.orders[seq]
	if o == nil {
		o = &orderSeen{orderID: ev.Data.Order.ID}
		r.orders[seq] = o
	}
	switch ev.Topic {
	case "order.created":
		o.created = at
	case "order.status_updated":
		if st := ev.Data.Order.ClientStatus; st != nil && (*st == "SUCCESS" || *st == "FAILED") && o.terminal.IsZero() {
			o.terminal = at
		}
	}
}

// arrivalsOf returns what arrived for the order with sequence seq.
func (r *receiver) arrivalsOf(seq int) (orderSeen, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.orders[seq]
	if o == nil {
		return orderSeen{}, false
	}
	return *o, true
}
