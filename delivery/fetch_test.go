package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestASenderWhoseFetchesFail: a poll that brings only fetch errors is
// followed by a second's wait, not by the next poll at once, and a topic
// deleted and made again (UNKNOWN_TOPIC_ID) ends the session, whose
// successor's new client reads the new topic.
func TestASenderWhoseFetchesFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int16
		ends error
	}{
		{"waits a second before polling again", kerr.TopicAuthorizationFailed.Code, nil},
		{"ends its session when a topic was made again", kerr.UnknownTopicID.Code, stream.ErrTopicMadeAgain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sender{Naming: schemas.Naming{}, Log: slog.New(slog.DiscardHandler), Concurrency: 4, PerEndpoint: 1, MaxBuffered: 10}
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, s.Topics()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			s.Brokers = cluster.ListenAddrs()
			failed := testenv.FailFetches(cluster, func() int16 { return tc.code })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			since := time.Now()
			go func() { ended <- s.session(ctx) }()
			if tc.ends != nil {
				select {
				case err := <-ended:
					if !errors.Is(err, tc.ends) {
						t.Fatalf("the session ended with %v, want %v", err, tc.ends)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("the session goes on after %d failed fetches", failed.Load())
				}
				return
			}
			testenv.Eventually(t, 30*time.Second, func() error {
				if n := failed.Load(); n < 4 {
					return fmt.Errorf("%d fetches failed", n)
				}
				return nil
			})
			if n, took := failed.Load(), time.Since(since); float64(n) > took.Seconds()+3 {
				t.Fatalf("%d failed fetches in %s: the session polls again at once", n, took)
			}
			cancel()
			if err := <-ended; err != nil {
				t.Fatalf("the session ended with %v", err)
			}
		})
	}
}

// TestALogCutBackBelowWhatWasTakenEndsTheSession: the client reports a
// partition cut back (an unclean leader election) and resumes at the cut.
// Below the records the session took, the records from the cut on would
// be dropped as seen already (found by review): the session ends, for the
// next one to take them. A cut past what was taken, or of a partition
// not this session's, changes nothing.
func TestALogCutBackBelowWhatWasTakenEndsTheSession(t *testing.T) {
	cut := func(topic string, partition int32, at int64) kgo.Fetches {
		return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{
			{Partition: partition, Err: &kgo.ErrDataLoss{Topic: topic, Partition: partition, ConsumedTo: 90, ResetTo: at}}}}}}}
	}
	for _, tc := range []struct {
		name    string
		fetches kgo.Fetches
		ends    bool
	}{
		{"a cut below the records taken", cut("deliveries", 0, 40), true},
		{"a cut past the records taken", cut("deliveries", 0, 80), false},
		{"a cut of a partition not this session's", cut("deliveries", 1, 10), false},
		{"a fetch error of another kind", kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "deliveries", Partitions: []kgo.FetchPartition{
			{Partition: 0, Err: kerr.NotLeaderForPartition}}}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := &session{s: &Sender{Log: slog.New(slog.DiscardHandler)},
				parts: map[tp]*part{{"deliveries", 0}: {next: 70, committed: 60, outstanding: map[int64]struct{}{}}}}
			st := ss.parts[tp{"deliveries", 0}]
			st.outstanding[35], st.outstanding[65] = struct{}{}, struct{}{} // taken, not finished
			err := ss.cutBelowTaken(tc.fetches)
			if ends := errors.Is(err, errCutBack); ends != tc.ends {
				t.Fatalf("the session ends: %v (%v), want %v", ends, err, tc.ends)
			}
			// What the release that ends the session commits: after a cut,
			// the first record not finished below it; else nothing new.
			off, ok := ss.watermark(st)
			if tc.ends && (!ok || off.Offset != 35) {
				t.Fatalf("the release would commit %d (%v), want 35, below the cut", off.Offset, ok)
			}
			if !tc.ends && ok {
				t.Fatalf("the release would commit %d, want nothing new", off.Offset)
			}
		})
	}
}
