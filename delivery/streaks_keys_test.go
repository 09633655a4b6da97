package delivery

import (
	"testing"

	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

// The Redis keys outlive a process: an upgraded sender must find the marks
// and streaks its predecessor wrote.
func TestRedisKeysKeepTheirFormatAcrossVersions(t *testing.T) {
	id := uuid.MustParse("0d6c5f4e-8a5b-4c1e-9e57-2f1b7c3a9d10")
	marks := &DoneMarks{Prefix: "pod:"}
	streaks := &Streaks{Prefix: "pod:"}
	for _, tc := range []struct{ name, got, want string }{
		{"a task's claim or done mark", marks.key(schemas.DeliveryTask{DeliveryID: id, Run: 2, Attempt: 3, Gen: 5}), "pod:wh:task:0d6c5f4e-8a5b-4c1e-9e57-2f1b7c3a9d10:2:3:5"},
		{"a webhook generation's failure streak", streaks.key(id, 4), "pod:wh:streak:0d6c5f4e-8a5b-4c1e-9e57-2f1b7c3a9d10:4"},
		{"the deliveries a streak counted", streaks.countedKey(streaks.key(id, 4)), "pod:wh:streak:0d6c5f4e-8a5b-4c1e-9e57-2f1b7c3a9d10:4:counted"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
