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
