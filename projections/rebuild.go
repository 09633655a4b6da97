package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/projections/held"
	"github.com/printpod/pod/schemas"
	"github.com/sethvargo/go-retry"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A rebuild (podctl replay) builds a read model again from the start of
// its topic, beside the live one, and swaps it in once it has caught up:
//
//  1. The read model's tables are made again, empty, in a schema of their
//     own (rebuild_<name>), with the live tables' columns, constraints and
//     indexes under the same names.
//  2. The projector's rebuild (its Rebuilder: the same writes, their
//     announcements held, see package held) runs in the rebuilding process
//     under the one stage runner, as the consumer <projector>.rebuild, on
//     connections whose search_path puts that schema first. Its offsets
//     are its own rows of consumer_offsets; its dead letters go to the
//     projector's topic.
//  3. Once it has applied the log as it stood at the start, and then
//     reached the live projector's offsets, one transaction locks the live
//     projector's offset rows, every partition's (its next batch waits),
//     and waits, at most CatchUp, for the rebuild to reach them again.
//     Then it stops the rebuild, replaces the live tables with the rebuilt
//     ones (with the live tables' grants), gives the live projector the
//     rebuild's offsets, announces what the rebuild applied past the live
//     projector's offsets (held.Release) and what the read model announces
//     of itself, and commits. A rebuild that does not catch up in time, or
//     a lock not had within two seconds, lets go and tries again later.
//
// Requests read the live read model, whole, until that commit, and the
// rebuilt one after it; the live projector goes on from where the rebuild
// stopped. An interrupted rebuild leaves its schema and offsets: the next
// run goes on from there. A rebuild made before a migration is not swapped
// in: the next run starts it again. One rebuild of a read model runs at a
// time (an advisory lock).

// Rebuild rebuilds read models: see above.
type Rebuild struct {
	Pool     *pgxpool.Pool // the service's database
	Brokers  []string
	Producer *kgo.Client // idempotent, acks=all (kafka.NewProducer): the rebuild's dead letters
	Naming   schemas.Naming
	Log      *slog.Logger
	// Progress, when set, hears how far the rebuild is, every 200 ms and
	// at each phase; the rebuild waits for it to return.
	Progress func(Progress)
	// MaxBatch is the rebuild's records per batch (default the runner's).
	MaxBatch int
	// CatchUp is how long the live projector may wait for the rebuild to
	// reach it before the swap (default 3 s, below the lock_timeout of the
	// service's stages).
	CatchUp time.Duration
}

// Progress is how far a rebuild is.
type Progress struct {
	Phase   Phase
	Applied int64 // records of the topic the rebuild has applied
	Total   int64 // records on the topic when this run started
	Resumed bool  // this run goes on from an earlier one's rebuild
}

// Phase is a step of a rebuild.
type Phase string

// The phases of a rebuild, in order.
const (
	PhaseRebuilding Phase = "rebuilding"  // applying the log as it stood at the start
	PhaseCatchingUp Phase = "catching up" // the live projector held while the rebuild reaches it
	PhaseSwapped    Phase = "swapped"     // the rebuilt tables are the live read model
)

// RebuildConsumer is the consumer that writes the rebuild of p.
func RebuildConsumer(p Projection) string { return p.Consumer + ".rebuild" }

// ShadowSchema is the schema the rebuild of the read model name is written in.
func ShadowSchema(name string) string { return "rebuild_" + name }

// Run rebuilds the read model name and swaps it in. It returns once the
// rebuilt read model is live, or with an error, leaving the live one as it
// was (and the rebuild to go on from).
func (r *Rebuild) Run(ctx context.Context, name string) error {
	p, ok := All[name]
	if !ok {
		return fmt.Errorf("unknown projection %q (known: %v)", name, Names())
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	unlock, locked, err := pg.TryLock(ctx, r.Pool, "podctl.replay "+name)
	if err != nil {
		return err
	}
	if !locked {
		return fmt.Errorf("another rebuild of %s is running: run this one once it has ended", name)
	}
	defer unlock()

	// The schema of the live tables is the one the service's unqualified
	// names resolve to.
	var live string
	if err := r.Pool.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, p.Tables[0]).Scan(&live); err != nil {
		return fmt.Errorf("find the live %s: %w", p.Tables[0], err)
	}
	shadow := ShadowSchema(name)
	resumed, err := r.prepare(ctx, p, name, live, shadow)
	if err != nil {
		return err
	}
	if _, err := r.Pool.Exec(ctx, held.Create(shadow)); err != nil {
		return fmt.Errorf("make the rebuild's table of announcements: %w", err)
	}
	topic := r.Naming.Topic(p.Topic)
	last, total, err := kafka.LastOffsets(ctx, kadm.NewClient(r.Producer), topic)
	if err != nil {
		return err
	}
	end := map[int32]int64{}
	for part, off := range last {
		end[part] = off + 1
	}

	cfg := r.Pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{shadow}.Sanitize() + ", " + pgx.Identifier{live}.Sanitize()
	cfg.MinConns, cfg.MaxConns = 0, 4
	shadowPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect for the rebuild: %w", err)
	}
	defer shadowPool.Close()
	c := p.Rebuilder(r.Naming, r.Log)
	c.Name, c.DeadLetterAs = RebuildConsumer(p), p.Consumer
	// A record the projector dead-lettered that fails again is passed, not
	// dead-lettered once more by every rebuild.
	c.DeadLettered, err = stream.DeadLetteredBy(ctx, r.Brokers, kadm.NewClient(r.Producer), r.Naming, p.Consumer, r.Log)
	if err != nil {
		return err
	}
	if r.MaxBatch > 0 {
		c.MaxBatch = r.MaxBatch
	}
	// A run killed without leaving the group keeps its member there until
	// the session times out, and the next run's join waits for that: the
	// shortest session brokers accept (group.min.session.timeout.ms) keeps
	// the wait to seconds. Nothing depends on the group but the wait: the
	// offsets are in Postgres.
	c.SessionOpts = func() []kgo.Opt {
		return []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(time.Second)}
	}
	project := c.Handle
	c.Handle = func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		// Were the schema gone, the search_path would name the live
		// tables: nothing is written then.
		var in string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&in); err != nil {
			return nil, err
		}
		if in != shadow {
			return nil, fmt.Errorf("the rebuild's schema %s is gone", shadow)
		}
		return project(ctx, tx, recs)
	}
	runner := &stream.Runner{Pool: shadowPool, Brokers: r.Brokers, Log: r.Log, Naming: r.Naming, Producer: r.Producer}
	rb := &rebuilding{r: r, runner: runner, consumer: c, topic: topic, total: total, resumed: resumed}
	rb.start(ctx)
	defer rb.stop()

	if err := rb.until(ctx, PhaseRebuilding, func(context.Context) (map[int32]int64, error) { return end, nil }); err != nil {
		return fmt.Errorf("the rebuild of %s stopped before the log end (run it again to go on): %w", name, err)
	}
	for _, t := range p.Tables {
		if _, err := r.Pool.Exec(ctx, `ANALYZE `+pgx.Identifier{shadow, t}.Sanitize()); err != nil {
			return fmt.Errorf("analyze the rebuilt %s: %w", t, err)
		}
	}
	// Each attempt first lets the rebuild reach the live projector's
	// offsets as they move, so the hold of the swap is short.
	liveOffsets := func(ctx context.Context) (map[int32]int64, error) {
		return stream.Offsets(ctx, r.Pool, p.Consumer, topic)
	}
	backoff := retry.WithMaxRetries(9, retry.WithCappedDuration(5*time.Second, retry.NewExponential(500*time.Millisecond)))
	err = retry.Do(ctx, backoff, func(ctx context.Context) error {
		rb.start(ctx)
		if err := rb.until(ctx, PhaseRebuilding, liveOffsets); err != nil {
			return err
		}
		err := r.swap(ctx, name, p, rb, live, shadow)
		var again *retryable
		if errors.As(err, &again) {
			r.Log.Warn("the rebuilt read model was not swapped in; trying again", "projection", name, "why", again.why)
			return retry.RetryableError(err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("swap in the rebuilt %s (run it again to go on): %w", name, err)
	}
	// The rebuild's group only ever showed its progress to kadm.
	if _, err := kadm.NewClient(r.Producer).DeleteGroup(ctx, r.Naming.Group(c.Name)); err != nil {
		r.Log.Warn("delete the rebuild's consumer group", "group", r.Naming.Group(c.Name), "err", err)
	}
	rb.report(PhaseSwapped)
	return nil
}

// retryable is a swap that did not happen, for now: the rebuild did not
// catch up within CatchUp, or a lock was not had within the swap's
// lock_timeout.
type retryable struct{ why string }

func (e *retryable) Error() string { return e.why }

// rebuilding is the rebuild's consumer, run by this process.
type rebuilding struct {
	r        *Rebuild
	runner   *stream.Runner
	consumer stream.Consumer
	topic    string
	total    int64
	resumed  bool
	applied  int64
	cancel   context.CancelFunc
	done     chan struct{}
}

func (b *rebuilding) start(ctx context.Context) {
	if b.done != nil {
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	b.cancel, b.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = b.runner.Run(rctx, b.consumer)
	}(b.done)
}

// stop returns once the consumer has stopped: a batch under way is
// committed or rolled back by then.
func (b *rebuilding) stop() {
	if b.done == nil {
		return
	}
	b.cancel()
	<-b.done
	b.done = nil
}

func (b *rebuilding) report(phase Phase) {
	if b.r.Progress != nil {
		b.r.Progress(Progress{Phase: phase, Applied: b.applied, Total: b.total, Resumed: b.resumed})
	}
}

// until waits, reporting phase, until the rebuild has applied every
// offset below target's.
func (b *rebuilding) until(ctx context.Context, phase Phase, target func(context.Context) (map[int32]int64, error)) error {
	return wait.Until[struct{}](ctx, nil, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		want, err := target(ctx)
		if err != nil {
			return false, err
		}
		have, err := stream.Offsets(ctx, b.r.Pool, b.consumer.Name, b.topic)
		if err != nil {
			return false, err
		}
		was := b.applied
		b.applied = sum(have)
		b.report(phase)
		if stream.Reached(have, want) {
			return true, nil
		}
		if b.applied > was {
			return false, nil // on its way: no log start to read
		}
		return false, b.pastGone(ctx, have, want)
	})
}

// pastGone, asked only while the rebuild makes no progress (a partition
// with nothing left to read stops it), moves the rebuild's offset of each
// partition whose records below want are all gone (retention deleted up
// to or past it: its log starts there) to where its log starts. The rebuild would never reach
// want there, having no record left to apply: a partition retention
// emptied (a quiet store's, after POD_KAFKA_RETENTION) held a replay told
// to go on from a truncated log until its --wait ended, every run.
func (b *rebuilding) pastGone(ctx context.Context, have, want map[int32]int64) error {
	starts, err := kadm.NewClient(b.r.Producer).ListStartOffsets(ctx, b.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("read the log start of %s: %w", b.topic, err)
	}
	var parts []int32
	var at []int64
	starts.Each(func(o kadm.ListedOffset) {
		if w, ok := want[o.Partition]; ok && have[o.Partition] < w && o.Offset >= w {
			parts, at = append(parts, o.Partition), append(at, o.Offset)
			b.r.Log.Warn("retention deleted every record of a partition the rebuild had still to read; it goes on from the log start",
				"topic", b.topic, "partition", o.Partition, "rebuilt_to", have[o.Partition], "log_start", o.Offset)
		}
	})
	if len(parts) == 0 {
		return nil
	}
	_, err = b.r.Pool.Exec(ctx, `INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)
		SELECT $1, $2, p, n FROM unnest($3::int[], $4::bigint[]) AS s(p, n)
		ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = greatest(consumer_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()`,
		b.consumer.Name, b.topic, parts, at)
	return err
}

// swap holds the live projector, waits for the rebuild to reach it, and
// replaces the live tables with the rebuilt ones, in one transaction. A
// swap that did not happen for now is a *retryable; the rebuild may have
// been stopped then, to be started again.
func (r *Rebuild) swap(ctx context.Context, name string, p Projection, rb *rebuilding, live, shadow string) error {
	ends, err := kadm.NewClient(r.Producer).ListEndOffsets(ctx, rb.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("list the partitions of %s: %w", rb.topic, err)
	}
	var partitions []int32
	ends.Each(func(o kadm.ListedOffset) { partitions = append(partitions, o.Partition) })
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Readers of the live tables hold the drop back, and it holds back
	// the readers that come after it: not for long.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
		return err
	}
	// Every partition's row, made when missing: the projector takes its
	// first record of a partition only once its row is there, so none
	// gets past the hold.
	if _, err := tx.Exec(ctx, `INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)
		SELECT $1, $2, p, 0 FROM unnest($3::int[]) AS p ORDER BY p ON CONFLICT DO NOTHING`, p.Consumer, rb.topic, partitions); err != nil {
		return notLocked(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_offsets WHERE consumer = $1 AND topic = $2 ORDER BY partition FOR UPDATE`,
		p.Consumer, rb.topic); err != nil {
		return notLocked(err)
	}
	holdAt, err := stream.Offsets(ctx, tx, p.Consumer, rb.topic)
	if err != nil {
		return err
	}
	catchUp := r.CatchUp
	if catchUp <= 0 {
		catchUp = 3 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, catchUp)
	err = rb.until(cctx, PhaseCatchingUp, func(context.Context) (map[int32]int64, error) { return holdAt, nil })
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &retryable{fmt.Sprintf("the rebuild did not reach the live projector within %s", catchUp)}
	}
	rb.stop()
	rebuilt, err := stream.Offsets(ctx, tx, rb.consumer.Name, rb.topic)
	if err != nil {
		return err
	}
	if !stream.Reached(rebuilt, holdAt) {
		return fmt.Errorf("the rebuild's offsets %v are behind the live projector's %v", rebuilt, holdAt)
	}
	// Offsets of two topics under the same name (deleted and made again
	// meanwhile) do not compare: the one behind moves to the new topic's
	// start with its next batch, and the swap waits for that.
	var others int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM consumer_offsets r JOIN consumer_offsets l
		ON l.consumer = $1 AND l.topic = r.topic AND l.partition = r.partition
		WHERE r.consumer = $2 AND r.topic_id <> l.topic_id`, p.Consumer, rb.consumer.Name).Scan(&others); err != nil {
		return err
	}
	if others > 0 {
		return &retryable{fmt.Sprintf("the rebuild and the live projector read %d partitions of %s as different topics (it was made again)", others, rb.topic)}
	}
	rb.applied = sum(rebuilt)
	liveTables := make([]string, len(p.Tables))
	for i, t := range p.Tables {
		liveTables[i] = pgx.Identifier{live, t}.Sanitize()
	}
	// A migration that changed the live tables has committed once they
	// are locked, or waits for this transaction: the rebuild is swapped
	// in only when it has their shape.
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(liveTables, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return notLocked(err)
	}
	var version int64
	var made *string
	if err := tx.QueryRow(ctx, `SELECT (SELECT version FROM schema_version), obj_description(to_regnamespace($1), 'pg_namespace')`,
		shadow).Scan(&version, &made); err != nil {
		return err
	}
	switch {
	case made == nil:
		return fmt.Errorf("the rebuild's schema %s is gone: run the replay again to start over", shadow)
	case *made != rebuildMark(name, version):
		return errors.New("a migration ran during the rebuild, so the rebuilt tables no longer have the live tables' shape: " +
			"run the replay again to start over")
	}
	// What the live tables carry beyond their shape, as it is now: an
	// operator may have changed it since the shadow tables were made.
	grants, err := grantsOf(ctx, tx, p.Tables, live, shadow)
	if err != nil {
		return err
	}
	storage, err := storageOf(ctx, tx, p.Tables, live, shadow)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, g := range append(grants, storage...) {
		b.Queue(g)
	}
	b.Queue(`DROP TABLE ` + strings.Join(liveTables, ", "))
	for _, t := range p.Tables {
		b.Queue(`ALTER TABLE ` + pgx.Identifier{shadow, t}.Sanitize() + ` SET SCHEMA ` + pgx.Identifier{live}.Sanitize())
	}
	// What the rebuild applied past the live projector is announced now:
	// the live projector goes on past it.
	held.Release(b, shadow, holdAt)
	b.Queue(`DROP SCHEMA ` + pgx.Identifier{shadow}.Sanitize())
	// The projector's offsets become the rebuild's, row for row: updated
	// in place, so the projector's claim waiting on them reads the new
	// offsets when this commits.
	b.Queue(`INSERT INTO consumer_offsets (consumer, topic, partition, next_offset, topic_id, leader_epoch, leader_epoch_at)
		SELECT $1, topic, partition, next_offset, topic_id, leader_epoch, leader_epoch_at FROM consumer_offsets WHERE consumer = $2 ORDER BY topic, partition
		ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset,
			topic_id = coalesce(EXCLUDED.topic_id, consumer_offsets.topic_id), leader_epoch = EXCLUDED.leader_epoch,
			leader_epoch_at = EXCLUDED.leader_epoch_at, updated_at = now()`,
		p.Consumer, rb.consumer.Name)
	b.Queue(`DELETE FROM consumer_offsets l WHERE l.consumer = $1 AND NOT EXISTS (SELECT 1 FROM consumer_offsets r
		WHERE r.consumer = $2 AND r.topic = l.topic AND r.partition = l.partition)`, p.Consumer, rb.consumer.Name)
	b.Queue(`DELETE FROM consumer_offsets WHERE consumer = $1`, rb.consumer.Name)
	if p.Announce != nil {
		p.Announce(b)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return notLocked(err)
	}
	return notLocked(tx.Commit(ctx))
}

// notLocked is a *retryable for a lock not had within lock_timeout, or
// given up to break a deadlock (the projector meeting a partition for the
// first time while the swap makes its row).
func notLocked(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") { // lock_not_available, deadlock_detected
		return &retryable{"a lock was not to be had: " + pgErr.Message}
	}
	return err
}

// prepare makes the rebuild's schema, with the live tables' shape and no
// rows, unless an earlier run's is there to go on from (resumed). A schema
// made before the last migration is made again.
func (r *Rebuild) prepare(ctx context.Context, p Projection, name, live, shadow string) (resumed bool, err error) {
	var version int64
	if err := r.Pool.QueryRow(ctx, `SELECT version FROM schema_version`).Scan(&version); err != nil {
		return false, fmt.Errorf("read the schema version: %w", err)
	}
	mark := rebuildMark(name, version)
	var made *string
	err = r.Pool.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, shadow).Scan(&made)
	switch {
	case err == nil && made != nil && *made == mark:
		return true, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("look for an earlier rebuild of %s: %w", name, err)
	}
	err = pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		ddl, err := cloneTables(ctx, tx, p.Tables, live, shadow)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`DROP SCHEMA IF EXISTS ` + pgx.Identifier{shadow}.Sanitize() + ` CASCADE`)
		b.Queue(`CREATE SCHEMA ` + pgx.Identifier{shadow}.Sanitize())
		b.Queue(`COMMENT ON SCHEMA ` + pgx.Identifier{shadow}.Sanitize() + ` IS ` + quoteLiteral(mark))
		b.Queue(`DELETE FROM consumer_offsets WHERE consumer = $1`, RebuildConsumer(p))
		for _, s := range ddl {
			b.Queue(s)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return false, fmt.Errorf("make the tables of the rebuild of %s: %w", name, err)
	}
	return false, nil
}

// rebuildMark is the comment on the schema of a rebuild of name made at
// the schema version.
func rebuildMark(name string, version int64) string {
	return fmt.Sprintf("rebuild of %s at schema version %d", name, version)
}

// storageOf is the DDL that gives the tables of schema shadow the storage
// parameters (autovacuum thresholds, fillfactor; their TOAST tables' too)
// their namesakes of schema live have now, which LIKE leaves out. A table
// with row-level security is refused: a rebuild would swap it in without
// its policies.
func storageOf(ctx context.Context, tx pgx.Tx, tables []string, live, shadow string) ([]string, error) {
	var out []string
	for _, t := range tables {
		from, to := pgx.Identifier{live, t}.Sanitize(), pgx.Identifier{shadow, t}.Sanitize()
		var secured bool
		var set, toastSet, had, toastHad []string
		err := tx.QueryRow(ctx, `SELECT l.relrowsecurity, coalesce(l.reloptions, '{}'), coalesce(lt.reloptions, '{}'),
			coalesce(s.reloptions, '{}'), coalesce(st.reloptions, '{}')
			FROM pg_class l LEFT JOIN pg_class lt ON lt.oid = l.reltoastrelid
			LEFT JOIN pg_class s ON s.oid = to_regclass($2) LEFT JOIN pg_class st ON st.oid = s.reltoastrelid
			WHERE l.oid = $1::regclass`, from, to).Scan(&secured, &set, &toastSet, &had, &toastHad)
		if err != nil {
			return nil, err
		}
		if secured {
			return nil, fmt.Errorf("%s has row-level security, which a rebuild does not copy", from)
		}
		var reset []string
		for _, o := range had {
			reset = append(reset, strings.SplitN(o, "=", 2)[0])
		}
		for _, o := range toastHad {
			reset = append(reset, "toast."+strings.SplitN(o, "=", 2)[0])
		}
		for _, o := range toastSet {
			set = append(set, "toast."+o)
		}
		if len(reset) > 0 {
			out = append(out, `ALTER TABLE `+to+` RESET (`+strings.Join(reset, ", ")+`)`)
		}
		if len(set) > 0 {
			out = append(out, `ALTER TABLE `+to+` SET (`+strings.Join(set, ", ")+`)`)
		}
	}
	return out, nil
}

// grantsOf is the GRANTs that give the tables of schema shadow what their
// namesakes of schema live grant to roles other than their owner (a
// read-only role an operator added, say).
func grantsOf(ctx context.Context, tx pgx.Tx, tables []string, live, shadow string) ([]string, error) {
	var out []string
	for _, t := range tables {
		rows, err := tx.Query(ctx, `SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END
			FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
			WHERE c.oid = $1::regclass AND a.grantee <> c.relowner ORDER BY 2, 1`, pgx.Identifier{live, t}.Sanitize())
		if err != nil {
			return nil, err
		}
		var privilege, grantee string
		_, err = pgx.ForEachRow(rows, []any{&privilege, &grantee}, func() error {
			out = append(out, `GRANT `+privilege+` ON `+pgx.Identifier{shadow, t}.Sanitize()+` TO `+grantee)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// cloneTables is the DDL that makes tables of schema live again, empty, in
// schema shadow: columns, defaults and checks (LIKE), storage parameters
// (storageOf), then primary keys,
// unique and exclusion constraints and indexes with the live names, then
// foreign keys, which name the shadow's tables (the search_path).
func cloneTables(ctx context.Context, tx pgx.Tx, tables []string, live, shadow string) ([]string, error) {
	var create, keys, foreign []string
	for _, t := range tables {
		from, to := pgx.Identifier{live, t}.Sanitize(), pgx.Identifier{shadow, t}.Sanitize()
		create = append(create, `CREATE TABLE `+to+` (LIKE `+from+` INCLUDING ALL EXCLUDING INDEXES)`)
		rows, err := tx.Query(ctx, `SELECT conname, contype = 'f', pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype IN ('p', 'u', 'x', 'f') ORDER BY conname`, from)
		if err != nil {
			return nil, err
		}
		var con, def string
		var isForeign bool
		_, err = pgx.ForEachRow(rows, []any{&con, &isForeign, &def}, func() error {
			s := `ALTER TABLE ` + to + ` ADD CONSTRAINT ` + pgx.Identifier{con}.Sanitize() + ` ` + def
			if isForeign {
				foreign = append(foreign, s)
			} else {
				keys = append(keys, s)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		// An index's definition names its table as quote_ident would.
		rows, err = tx.Query(ctx, `SELECT pg_get_indexdef(i.indexrelid), quote_ident($2) || '.' || quote_ident($3)
			FROM pg_index i WHERE i.indrelid = $1::regclass
			AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
			ORDER BY i.indexrelid`, from, live, t)
		if err != nil {
			return nil, err
		}
		var table string
		_, err = pgx.ForEachRow(rows, []any{&def, &table}, func() error {
			on := " ON " + table + " USING "
			if !strings.Contains(def, on) {
				return fmt.Errorf("an index of %s reads %q", from, def)
			}
			keys = append(keys, strings.Replace(def, on, " ON "+to+" USING ", 1))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	storage, err := storageOf(ctx, tx, tables, live, shadow)
	if err != nil {
		return nil, err
	}
	searchPath := `SET LOCAL search_path TO ` + pgx.Identifier{shadow}.Sanitize() + `, ` + pgx.Identifier{live}.Sanitize()
	out := append(append(create, storage...), searchPath)
	out = append(out, keys...)
	return append(out, foreign...), nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func sum(offsets map[int32]int64) int64 {
	var n int64
	for _, off := range offsets {
		n += off
	}
	return n
}
