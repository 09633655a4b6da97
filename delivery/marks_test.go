package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
)

// TestDoneMarksLetEachTaskBeAttemptedOnce plays the records that can carry
// one task, on the pipelined client the sender uses: a record read again
// attempts its task until the outcome is marked done; a second record
// carrying the same task (a redone fan-out or deferral) never does; a
// record deferred to a retry tier hands its claim to its copy there.
func TestDoneMarksLetEachTaskBeAttemptedOnce(t *testing.T) {
	ctx := context.Background()
	client := testenv.NewRedis(t)
	pipelined, err := client.AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pipelined.Close() })
	marks := &DoneMarks{Redis: pipelined, Prefix: "podtest:" + testenv.RandomSuffix() + ":"}

	const topic = "pod.webhook.deliveries"
	type read struct {
		partition int32
		offset    int64
		done      bool // the outcome is recorded after this read's attempt
	}
	for _, tc := range []struct {
		name  string
		reads []read
		want  []bool // attempted, per read
	}{
		{"a task's first record attempts it",
			[]read{{3, 10, true}}, []bool{true}},
		{"a record read again after its outcome was recorded skips the task",
			[]read{{3, 10, true}, {3, 10, false}}, []bool{true, false}},
		{"a record read again before its outcome was recorded attempts the task again",
			[]read{{3, 10, false}, {3, 10, true}, {3, 10, false}}, []bool{true, true, false}},
		{"a second record of a task done skips it",
			[]read{{3, 10, true}, {3, 42, false}}, []bool{true, false}},
		{"a second record of a task another record claimed skips it, and the first still attempts it",
			[]read{{3, 10, false}, {3, 42, false}, {3, 10, true}, {3, 42, false}}, []bool{true, false, true, false}},
		{"the same offset of another partition is another record",
			[]read{{3, 10, false}, {4, 10, false}}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 2}
			t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
			for i, r := range tc.reads {
				got := claim(marks, ctx, topic, r.partition, r.offset, task)
				if got != tc.want[i] {
					t.Fatalf("read %d (partition %d, offset %d): attempted %v, want %v", i+1, r.partition, r.offset, got, tc.want[i])
				}
				if got && r.done {
					if err := marks.Done(ctx, task, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ttl := client.TTL(ctx, marks.key(task)).Val(); ttl <= 0 || ttl > IDTTL {
				t.Errorf("the mark's time to live is %v, want at most %v", ttl, IDTTL)
			}
		})
	}

	// A fan-out redone after its webhook was disabled and enabled again
	// emits the task again for the new generation: the first try's copy,
	// cancelled when worked, does not keep the new one from its attempt.
	t.Run("a task of a newer generation is claimed apart from the older copy", func(t *testing.T) {
		old := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1, Gen: 1}
		renewed := old
		renewed.Gen = 2
		t.Cleanup(func() { client.Del(context.Background(), marks.key(old), marks.key(renewed)) })
		if !claim(marks, ctx, topic, 3, 10, old) {
			t.Fatal("the first copy was not claimed")
		}
		if err := marks.Done(ctx, old, false); err != nil {
			t.Fatal(err)
		}
		if !claim(marks, ctx, topic, 3, 42, renewed) {
			t.Fatal("the task of the new generation was skipped: the old copy's mark took it")
		}
	})

	const tier = "pod.webhook.retry.1m"
	for _, tc := range []struct {
		name    string
		claimer int64 // offset of the record that claims first; -1: none
		done    bool  // that record's outcome is recorded
		want    bool  // the copy on the tier attempts the task
	}{
		{"a deferred record whose earlier reading claimed the task hands the claim to its copy", 10, false, true},
		{"a deferred record no one claimed for leaves its copy free to claim", -1, false, true},
		{"a deferred record leaves another record's claim where it is", 42, false, false},
		{"a deferred record of a task done leaves it done", 10, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
			t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
			if tc.claimer >= 0 {
				if !claim(marks, ctx, topic, 3, tc.claimer, task) {
					t.Fatal("the first claim was refused")
				}
				if tc.done {
					if err := marks.Done(ctx, task, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := marks.Move(ctx, task, topic, 3, 10, tier, 3, 7); err != nil {
				t.Fatal(err)
			}
			if got := claim(marks, ctx, tier, 3, 7, task); got != tc.want {
				t.Fatalf("the copy on the tier attempted %v, want %v", got, tc.want)
			}
			if tc.claimer == 10 && !tc.done && claim(marks, ctx, topic, 3, 10, task) {
				t.Fatal("the deferred record still attempts the task it handed over")
			}
		})
	}

	// A deferral claims each task for its record until past the copy's
	// due time before it makes the copy. Cut short between the copy and
	// the claim's move (a crash), the record is read again and attempts the
	// task itself: its done mark must still stand when the copy comes due.
	const wait = 30 * time.Minute
	t.Run("a deferral cut short before its claim moved leaves a mark that outlives the copy's wait", func(t *testing.T) {
		task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
		t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
		if mine, err := marks.Reserve(ctx, task, topic, 3, 10, wait); err != nil || !mine {
			t.Fatalf("the deferring record's reservation: %v, %v", mine, err)
		}
		claimed, again := marks.Claim(ctx, topic, 3, 10, task)
		if !claimed || !again {
			t.Fatalf("the record read again after the crash: attempted %v, its own claim %v; want both", claimed, again)
		}
		if err := marks.Done(ctx, task, again); err != nil {
			t.Fatal(err)
		}
		if ttl := client.PTTL(ctx, marks.key(task)).Val(); ttl < wait {
			t.Errorf("the done mark lives %v; the copy comes due in %v", ttl, wait)
		}
		if claim(marks, ctx, tier, 3, 7, task) {
			t.Error("the copy attempted the task its record attempted")
		}
	})
	t.Run("a record read again long after its claim marks its task done for the full time", func(t *testing.T) {
		task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
		t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
		// Its claim has a minute left (its first reading's attempt was
		// retried for fourteen).
		if err := client.Set(ctx, marks.key(task), recordMark(topic, 3, 10), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		claimed, again := marks.Claim(ctx, topic, 3, 10, task)
		if !claimed || !again {
			t.Fatalf("attempted %v, its own claim %v; want both", claimed, again)
		}
		if err := marks.Done(ctx, task, again); err != nil {
			t.Fatal(err)
		}
		if ttl := client.PTTL(ctx, marks.key(task)).Val(); ttl < IDTTL-time.Minute {
			t.Errorf("the done mark lives %v; want %v", ttl, IDTTL)
		}
	})
	t.Run("a deferral hands its reservation to the copy, time to live and all", func(t *testing.T) {
		task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
		t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
		if mine, err := marks.Reserve(ctx, task, topic, 3, 10, wait); err != nil || !mine {
			t.Fatalf("the deferring record's reservation: %v, %v", mine, err)
		}
		if err := marks.Move(ctx, task, topic, 3, 10, tier, 3, 7); err != nil {
			t.Fatal(err)
		}
		if claim(marks, ctx, topic, 3, 10, task) {
			t.Error("the deferred record read again attempted the task its copy holds")
		}
		if ttl := client.PTTL(ctx, marks.key(task)).Val(); ttl < wait {
			t.Errorf("the copy's claim lives %v; the copy comes due in %v", ttl, wait)
		}
		if !claim(marks, ctx, tier, 3, 7, task) {
			t.Error("the copy did not attempt its task")
		}
	})
	for _, tc := range []struct {
		name string
		done bool
	}{{"a task another record claimed is not deferred", false}, {"a task done is not deferred", true}} {
		t.Run(tc.name, func(t *testing.T) {
			task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
			t.Cleanup(func() { client.Del(context.Background(), marks.key(task)) })
			if !claim(marks, ctx, topic, 3, 42, task) {
				t.Fatal("the first claim was refused")
			}
			if tc.done {
				if err := marks.Done(ctx, task, false); err != nil {
					t.Fatal(err)
				}
			}
			if mine, err := marks.Reserve(ctx, task, topic, 3, 10, wait); err != nil || mine {
				t.Fatalf("reserved %v, %v; want refused", mine, err)
			}
			if ttl := client.PTTL(ctx, marks.key(task)).Val(); ttl > IDTTL {
				t.Errorf("the claim's time to live grew to %v", ttl)
			}
		})
	}

	t.Run("without Redis every record attempts its task", func(t *testing.T) {
		down := redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t), MaxRetries: -1})
		t.Cleanup(func() { _ = down.Close() })
		m := &DoneMarks{Redis: down, Prefix: marks.Prefix}
		task := schemas.DeliveryTask{DeliveryID: uuid.New(), Run: 1, Attempt: 1}
		for i := range 2 {
			if !claim(m, ctx, topic, 0, 5, task) {
				t.Fatalf("read %d skipped its task with Redis away", i+1)
			}
			_ = m.Done(ctx, task, false)
		}
	})
}

// TestAFailedDeliveryCountsOnceInItsWebhooksStreak: the failure of a
// delivery run is counted before its outcome is recorded, so a sender
// that stops in between counts it again when the task is read again; a
// run's failure counts once, a run of another delivery (or a resend's
// new run) counts anew, and a success starts the streak over.
func TestAFailedDeliveryCountsOnceInItsWebhooksStreak(t *testing.T) {
	ctx := context.Background()
	client := testenv.NewRedis(t)
	streaks := &Streaks{Redis: client, Prefix: "podtest:" + testenv.RandomSuffix() + ":"}
	hook, first, second := uuid.New(), uuid.New(), uuid.New()
	for i, step := range []struct {
		name     string
		delivery uuid.UUID
		run      int
		reset    bool
		want     int
	}{
		{"a delivery's failure starts the streak", first, 1, false, 1},
		{"the same failure counted again leaves it", first, 1, false, 1},
		{"another delivery's failure adds to it", second, 1, false, 2},
		{"a resend's failed run adds to it", first, 2, false, 3},
		{"a success ends it", uuid.Nil, 0, true, 0},
		{"a failure after the success starts it again", second, 2, false, 1},
	} {
		if step.reset {
			if err := streaks.ResetWith(ctx, client, hook, 1).Err(); err != nil {
				t.Fatal(err)
			}
		} else if got := streaks.Fail(ctx, hook, 1, step.delivery, step.run); got != step.want {
			t.Errorf("step %d, %s: the streak is %d, want %d", i, step.name, got, step.want)
		}
		counts, err := streaks.Counts(ctx, []uuid.UUID{hook}, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		if counts[0] != step.want {
			t.Errorf("step %d, %s: the webhook shows %d failures, want %d", i, step.name, counts[0], step.want)
		}
	}
}

// claim is whether a record's reading attempts its task.
func claim(m *DoneMarks, ctx context.Context, topic string, partition int32, offset int64, t schemas.DeliveryTask) bool {
	attempt, _ := m.Claim(ctx, topic, partition, offset, t)
	return attempt
}
