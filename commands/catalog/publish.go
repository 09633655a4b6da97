package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Progress is told how many of total events are acknowledged so far.
type Progress func(done, total int)

// Publish produces events to the catalog topic and waits until the broker
// acknowledged all of them. It returns the highest acknowledged offset per
// partition, so a caller can wait for the projection to pass them.
func Publish(ctx context.Context, cl *kgo.Client, n schemas.Naming, events []Keyed, progress Progress) (map[int32]int64, error) {
	var (
		mu       sync.Mutex
		done     int
		firstErr error
		last     = map[int32]int64{}
		wg       sync.WaitGroup
	)
	for _, k := range events {
		value, err := codec.Marshal(k.Event)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		rec := &kgo.Record{
			Topic:   n.Topic(schemas.TopicCatalogEvents),
			Key:     []byte(k.Key.String()),
			Value:   value,
			Headers: []kgo.RecordHeader{{Key: "type", Value: []byte(k.Event.Type)}},
		}
		wg.Add(1)
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			last[r.Partition] = max(last[r.Partition], r.Offset)
			done++
			if progress != nil {
				progress(done, len(events))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("publish catalog: %d of %d events acknowledged: %w", done, len(events), firstErr)
	}
	return last, nil
}

// Digest identifies a catalog file's content for an account, so the same
// file is not published twice (used for the demo catalog).
func Digest(f File) string {
	b, _ := json.Marshal(f)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
