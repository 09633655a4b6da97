package order

import (
	"fmt"
	"slices"
	"testing"
)

// TestQueuePlaces: whatever order entries leave in, a waiting entry's place
// (its sequence number, less the frontier, less the out-of-turn departures
// before it) is its rank among the entries still waiting, and the frontier
// keeps out-of-turn departures to those beyond it.
func TestQueuePlaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		entries   int
		leave     []int64
		frontier  int64
		departed  []int64
		waitingAt map[int64]int64 // seq -> place
	}{
		{"entries that leave in turn move the frontier and leave nothing behind", 4, []int64{1, 2}, 2, nil,
			map[int64]int64{3: 1, 4: 2}},
		{"an entry leaving out of turn is kept beyond the frontier", 4, []int64{3}, 0, []int64{3},
			map[int64]int64{1: 1, 2: 2, 4: 3}},
		{"the frontier absorbs the out-of-turn departures it reaches", 5, []int64{3, 2, 1}, 3, nil,
			map[int64]int64{4: 1, 5: 2}},
		{"a gap keeps what lies beyond it", 6, []int64{5, 2, 1}, 2, []int64{5},
			map[int64]int64{3: 1, 4: 2, 6: 3}},
		{"everything leaving in reverse empties the queue", 3, []int64{3, 2, 1}, 3, nil, map[int64]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &queue{departed: map[int64]bool{}}
			for range tc.entries {
				q.enter()
			}
			for _, s := range tc.leave {
				q.leave(&s)
			}
			var departed []int64
			for s := range q.departed {
				departed = append(departed, s)
			}
			slices.Sort(departed)
			if q.frontier != tc.frontier || !slices.Equal(departed, tc.departed) || q.pending != int64(len(tc.waitingAt)) {
				t.Fatalf("frontier %d, departed %v, pending %d; want %d, %v, %d", q.frontier, departed, q.pending,
					tc.frontier, tc.departed, len(tc.waitingAt))
			}
			for seq, want := range tc.waitingAt {
				place := seq - q.frontier
				for s := range q.departed {
					if s < seq {
						place--
					}
				}
				if place != want {
					t.Errorf("%s: entry %d at place %d, want %d", fmt.Sprint(tc.leave), seq, place, want)
				}
			}
		})
	}
}
