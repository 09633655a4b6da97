package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/printpod/pod/internal/testenv"
)

// TestAClaimIsEndedOrReplacedOnlyByItsHolder: a holder deletes or
// replaces a key only while it still holds its own value there (or, to
// replace, nothing: its value ran out and nobody took the key); another
// holder's value is left as it is.
func TestAClaimIsEndedOrReplacedOnlyByItsHolder(t *testing.T) {
	ctx := context.Background()
	c, err := Open(ctx, testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "rdbtest:" + testenv.RandomSuffix()
	defer c.Del(ctx, key)
	tests := []struct {
		name    string
		holds   string // the key's value before; "" for none
		replace bool   // SetIfHolds mine → done, else DeleteIfHolds mine
		done    bool
		after   string // the key's value after; "" for none
	}{
		{"the holder deletes its own claim", "mine", false, true, ""},
		{"another's claim is not deleted", "theirs", false, false, "theirs"},
		{"a claim gone is not deleted twice", "", false, false, ""},
		{"the holder replaces its own claim", "mine", true, true, "done"},
		{"a claim that ran out is replaced", "", true, true, "done"},
		{"another's claim is not replaced", "theirs", true, false, "theirs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Del(ctx, key)
			if tt.holds != "" {
				c.Set(ctx, key, tt.holds, time.Minute)
			}
			var done bool
			var err error
			if tt.replace {
				done, err = SetIfHolds(ctx, c, key, "mine", "done", time.Minute)
			} else {
				done, err = DeleteIfHolds(ctx, c, key, "mine")
			}
			if err != nil {
				t.Fatal(err)
			}
			after, _ := c.Get(ctx, key).Result()
			if done != tt.done || after != tt.after {
				t.Fatalf("done %v, key holds %q; want %v and %q", done, after, tt.done, tt.after)
			}
			if tt.replace && tt.done {
				if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
					t.Fatalf("replaced with a TTL of %s, want up to a minute", ttl)
				}
			}
		})
	}
}
