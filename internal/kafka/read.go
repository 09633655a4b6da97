package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadPartition calls f for each record of topic's partition in [from,
// to), in order (a record compaction or retention removed is not there to
// read: the read goes on from the next one the log holds). Each fetch has
// a minute, not the whole read, so a caller that works each record as it
// comes (a replay producing thousands) is not cut short.
func ReadPartition(ctx context.Context, brokers []string, topic string, partition int32, from, to int64, f func(*kgo.Record) error) error {
	if from >= to {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("pod-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	next := from
	for next < to {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		fs := cl.PollFetches(pctx)
		err := pctx.Err()
		cancel()
		if err != nil {
			return fmt.Errorf("read %s/%d at offset %d: %w", topic, partition, next, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("read %s/%d: %w", topic, partition, ferr)
		}
		for _, r := range fs.Records() {
			if r.Offset >= to {
				return nil
			}
			if err := f(r); err != nil {
				return err
			}
			next = r.Offset + 1
		}
	}
	return nil
}
