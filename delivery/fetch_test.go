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
