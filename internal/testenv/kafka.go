package testenv

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FailFetches makes cluster answer each fetch with the error code() gives
// for every partition asked for, while it gives one (not 0), and returns
// the count of fetches so answered.
func FailFetches(cluster *kfake.Cluster, code func() int16) *atomic.Int32 {
	var failed atomic.Int32
	cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.FetchRequest)
		c := code()
		if c == 0 || len(req.Topics) == 0 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, c
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		failed.Add(1)
		return resp, nil, true
	})
	return &failed
}

// CutBack makes cluster answer each OffsetForLeaderEpoch as the leader of
// logs cut back (an unclean leader election) would: the epoch asked about
// ends at the offset at gives for the partition. While at gives -1 for a
// partition asked about, the broker answers the request itself. It
// returns the count of partitions answered as cut.
func CutBack(cluster *kfake.Cluster, at func(topic string, partition int32) int64) *atomic.Int32 {
	var cut atomic.Int32
	cluster.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if at(rt.Topic, rp.Partition) < 0 {
					return nil, nil, false
				}
			}
		}
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				end := at(rt.Topic, rp.Partition)
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, end
				st.Partitions = append(st.Partitions, sp)
				cut.Add(1)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &cut
}
