package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The cost of the run, per accepted order: what the service spent, counted
// over the whole run (first send to the end of the drain, warmup included)
// and divided by every accepted order. Counts, unlike rates, hold still on
// a shared, noisy machine.
//
//   - CPU: podsvc (every process started here), the Postgres processes
//     serving its database (its backends, the postmaster and the shared
//     background workers), and Redis, from /proc every second. The Kafka
//     brokers' JVMs are counted apart (a real cluster only; the embedded
//     broker is inside podsvc).
//   - Postgres: pg_stat_database of the service's database: commits
//     (xact_commit), rows written (tup_inserted + tup_updated +
//     tup_deleted) and rows read (tup_returned: rows read by sequential
//     scans and index entries returned by index scans). Also the WAL the
//     server wrote (pg_stat_wal: records and bytes), which prices every
//     row version and index entry written; it counts the whole server, so
//     it is the service's only when nothing else writes there.
//   - Kafka: records produced, the growth of the end offsets of the
//     service's topics (the run's prefix on a cluster, every topic on the
//     embedded broker). The idempotent producer's retries add nothing.

// cpuGroups names the process groups the cost meter counts.
const (
	cpuPodsvc   = "podsvc"
	cpuPostgres = "postgres"
	cpuRedis    = "redis"
	cpuKafka    = "kafka"
)

// procInfo is what classifying a process needs from /proc.
type procInfo struct {
	comm    string // /proc/<pid>/comm
	cmdline string // /proc/<pid>/cmdline, NULs as spaces
}

// processGroup says which group a process of the machine belongs to, or "" for
// none. A Postgres client backend counts only when it serves database db;
// its title is "postgres: <user> <database> <host>(<port>) <state>" (or
// "[local]" for a socket). Background processes serve every database and
// are counted whole.
func processGroup(p procInfo, db string) string {
	switch {
	case p.comm == "redis-server":
		return cpuRedis
	case p.comm == "java" && strings.Contains(p.cmdline, " kafka.Kafka "):
		return cpuKafka
	case p.comm != "postgres" && !strings.HasPrefix(p.cmdline, "postgres:"):
		return ""
	}
	title, ok := strings.CutPrefix(p.cmdline, "postgres: ")
	if !ok {
		return cpuPostgres // the postmaster
	}
	f := strings.Fields(title)
	if len(f) >= 3 && (strings.HasSuffix(f[2], ")") || f[2] == "[local]") {
		if f[1] == db {
			return cpuPostgres
		}
		return ""
	}
	if len(f) >= 3 && f[0] == "autovacuum" && f[1] == "worker" {
		if f[2] == db {
			return cpuPostgres
		}
		return ""
	}
	return cpuPostgres
}

func readProc(pid int) (procInfo, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(dir + "/comm")
	if err != nil {
		return procInfo{}, false
	}
	cmd, _ := os.ReadFile(dir + "/cmdline")
	return procInfo{comm: strings.TrimSpace(string(comm)),
		cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))}, true
}

// cpuMeter adds up, per group, the CPU ticks processes spent between its
// samples. A process is counted from its first sample on; one that starts
// and ends between two samples is missed (the service's processes and
// connections live for the run).
type cpuMeter struct {
	db     string
	pidsOf func() []int // podsvc
	kafka  bool         // count the Kafka brokers' JVMs (the service runs on that cluster)

	mu    sync.Mutex
	on    bool
	last  map[int]uint64 // ticks at the previous sample, per pid
	group map[int]string
	ticks map[string]uint64
}

func newCPUMeter(db string, pidsOf func() []int) *cpuMeter {
	return &cpuMeter{db: db, pidsOf: pidsOf, last: map[int]uint64{}, group: map[int]string{}, ticks: map[string]uint64{}}
}

func (m *cpuMeter) run(ctx context.Context) { everySecond(ctx, m.sample) }

func (m *cpuMeter) begin() {
	m.mu.Lock()
	m.on = true
	m.mu.Unlock()
	m.sample()
}

// end takes the last sample and stops counting.
func (m *cpuMeter) end() {
	m.sample()
	m.mu.Lock()
	m.on = false
	m.mu.Unlock()
}

func (m *cpuMeter) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		return
	}
	groups := map[int]string{}
	for _, pid := range m.pidsOf() {
		if pid > 0 {
			groups[pid] = cpuPodsvc
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || groups[pid] != "" {
			continue
		}
		if g, known := m.group[pid]; known {
			if g != "" {
				groups[pid] = g
			}
			continue
		}
		if info, ok := readProc(pid); ok {
			m.group[pid] = processGroup(info, m.db)
			if m.group[pid] == cpuKafka && !m.kafka {
				m.group[pid] = ""
			}
			if g := m.group[pid]; g != "" {
				groups[pid] = g
			}
		}
	}
	seen := map[int]uint64{}
	for pid, g := range groups {
		t, err := cpuTicks(strconv.Itoa(pid))
		if err != nil {
			continue
		}
		if prev, ok := m.last[pid]; ok && t >= prev {
			m.ticks[g] += t - prev
		}
		seen[pid] = t
	}
	m.last = seen
}

// ms returns the CPU milliseconds counted per group.
func (m *cpuMeter) ms() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]float64{}
	for g, t := range m.ticks {
		out[g] = float64(t) * 1000 / userHZ
	}
	return out
}

// pgCounts are pg_stat_database's counters of one database, and the
// server's WAL counters (pg_stat_wal; WAL false when it could not be read).
type pgCounts struct {
	Commits, Written, Read int64
	WAL                    bool
	WALRecords, WALBytes   int64
}

func readPgCounts(ctx context.Context, dbURL string) (pgCounts, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return pgCounts{}, err
	}
	defer conn.Close(ctx)
	// Backends report their counters when idle, at most once a second:
	// give the service's last transactions time to arrive.
	var c pgCounts
	err = conn.QueryRow(ctx, `SELECT xact_commit, tup_inserted + tup_updated + tup_deleted, tup_returned
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.Commits, &c.Written, &c.Read)
	if err != nil {
		return c, err
	}
	// pg_stat_wal is Postgres 14's: an older server reports no WAL.
	c.WAL = conn.QueryRow(ctx, `SELECT wal_records, wal_bytes::bigint FROM pg_stat_wal`).Scan(&c.WALRecords, &c.WALBytes) == nil
	return c, nil
}

// kafkaRecords sums the end offsets of the service's topics: every topic
// with prefix (all of them for an empty prefix, the embedded broker).
func kafkaRecords(ctx context.Context, brokers []string, prefix string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("podbench-cost"))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return 0, err
	}
	var mine []string
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, prefix) {
			mine = append(mine, t)
		}
	}
	if len(mine) == 0 {
		return 0, nil
	}
	ends, err := adm.ListEndOffsets(ctx, mine...)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n, ends.Error()
}

// costMeter takes the run's start and end readings.
type costMeter struct {
	cpu          *cpuMeter
	dbURL        string
	kafkaBrokers func() ([]string, error)
	kafkaPrefix  string

	pg0, pg1 pgCounts
	k0, k1   int64
	errs     []string
}

// newCostMeter meters the service at dbURL; brokers finds its Kafka (a
// running podsvc's embedded broker has an address only once it runs).
// realKafka says the service runs on a cluster of this machine whose
// brokers' CPU is counted apart.
func newCostMeter(dbURL string, pidsOf func() []int, brokers func() ([]string, error), prefix string, realKafka bool) *costMeter {
	db := ""
	if cfg, err := pgx.ParseConfig(dbURL); err == nil {
		db = cfg.Database
	}
	cpu := newCPUMeter(db, pidsOf)
	cpu.kafka = realKafka
	return &costMeter{cpu: cpu, dbURL: dbURL, kafkaBrokers: brokers, kafkaPrefix: prefix}
}

func (c *costMeter) fail(what string, err error) {
	c.errs = append(c.errs, fmt.Sprintf("%s: %v", what, err))
}

func (c *costMeter) read(ctx context.Context) (pgCounts, int64) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pg, err := readPgCounts(ctx, c.dbURL)
	if err != nil {
		c.fail("pg_stat_database", err)
	}
	var recs int64
	if brokers, err := c.kafkaBrokers(); err != nil {
		c.fail("Kafka brokers", err)
	} else if recs, err = kafkaRecords(ctx, brokers, c.kafkaPrefix); err != nil {
		c.fail("Kafka end offsets", err)
	}
	return pg, recs
}

// begin reads the counters before the first send.
func (c *costMeter) begin(ctx context.Context) {
	c.pg0, c.k0 = c.read(ctx)
	c.cpu.begin()
}

// end reads them after the drain. Postgres backends report their
// counters when idle, at most once a second (PGSTAT_MIN_INTERVAL), so the
// reading waits that long first.
func (c *costMeter) end(ctx context.Context) {
	c.cpu.end()
	sleepUntil(ctx, time.Now().Add(1500*time.Millisecond))
	c.pg1, c.k1 = c.read(ctx)
}

// costReport is the run's cost per accepted order.
type costReport struct {
	CPUMsPerOrder        *float64           `json:"cpu_ms_per_order"`     // podsvc + Postgres + Redis
	CPUMsPerOrderBy      map[string]float64 `json:"cpu_ms_per_order_by"`  // podsvc, postgres, redis, kafka (a real cluster's brokers)
	PgCommitsPerOrder    *float64           `json:"pg_commits_per_order"` // the service's database
	PgWrittenPerOrder    *float64           `json:"pg_rows_written_per_order"`
	PgReadPerOrder       *float64           `json:"pg_rows_read_per_order"`
	PgWALRecordsPerOrder *float64           `json:"pg_wal_records_per_order"` // the whole server's
	PgWALBytesPerOrder   *float64           `json:"pg_wal_bytes_per_order"`
	KafkaRecordsPerOrder *float64           `json:"kafka_records_per_order"` // produced
	Orders               int                `json:"cost_orders"`             // the divisor: accepted, warmup included
	Errors               []string           `json:"cost_errors,omitempty"`
}

func (c *costMeter) report(orders int) costReport {
	r := costReport{Orders: orders, Errors: c.errs, CPUMsPerOrderBy: map[string]float64{}}
	if orders == 0 {
		return r
	}
	per := func(x float64) *float64 { return ptr(round(x/float64(orders), 2)) }
	ms := c.cpu.ms()
	total := 0.0
	for g, v := range ms {
		r.CPUMsPerOrderBy[g] = round(v/float64(orders), 3)
		if g != cpuKafka {
			total += v
		}
	}
	r.CPUMsPerOrder = per(total)
	if c.pg1.Commits >= c.pg0.Commits && c.pg1.Commits > 0 {
		r.PgCommitsPerOrder = per(float64(c.pg1.Commits - c.pg0.Commits))
		r.PgWrittenPerOrder = per(float64(c.pg1.Written - c.pg0.Written))
		r.PgReadPerOrder = per(float64(c.pg1.Read - c.pg0.Read))
	}
	if c.pg0.WAL && c.pg1.WAL && c.pg1.WALRecords >= c.pg0.WALRecords {
		r.PgWALRecordsPerOrder = per(float64(c.pg1.WALRecords - c.pg0.WALRecords))
		r.PgWALBytesPerOrder = per(float64(c.pg1.WALBytes - c.pg0.WALBytes))
	}
	if c.k1 > c.k0 {
		r.KafkaRecordsPerOrder = per(float64(c.k1 - c.k0))
	}
	return r
}

// embeddedBrokers finds a podsvc's embedded broker from the address file
// in its data dir.
func embeddedBrokers(dataDir string) func() ([]string, error) {
	return func() ([]string, error) {
		raw, err := os.ReadFile(filepath.Join(dataDir, "kafka.addr"))
		if err != nil {
			return nil, err
		}
		addr := strings.TrimSpace(string(raw))
		if addr == "" {
			return nil, fmt.Errorf("%s is empty", filepath.Join(dataDir, "kafka.addr"))
		}
		return []string{addr}, nil
	}
}
