package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/loopback"
	"github.com/redis/go-redis/v9"
)

// podsvc is a podsvc process podbench started: a fresh database, data dir
// and Redis prefix of its own. It can be killed and started again on the
// same ones (the kill -9 fault).
type podsvc struct {
	bin         string
	tmp         string // temp root: binary, data dir, log
	dataDir     string
	addr        string
	dbURL       string
	dbName      string
	adminURL    string // the same server's maintenance database
	redisURL    string
	redisPrefix string
	env         []string
	logPath     string
	name        string // "podsvc", or "podsvc-2" … for further replicas

	// A real cluster: the brokers and the run's own topic and group prefix,
	// dropped by the first replica's cleanup. Empty: the embedded broker.
	kafkaBrokers []string
	kafkaPrefix  string
	replica      bool // shares the first one's database, Redis keys and topics

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// moduleRoot finds the directory of this repository's go.mod, from the
// working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(raw, []byte("module github.com/printpod/pod\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run podbench inside the github.com/printpod/pod module, or pass --podsvc-bin or --target")
		}
		dir = parent
	}
}

// withDatabase returns the Postgres URL u naming database name instead.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return "", fmt.Errorf("--database-url %q: a postgres:// URL is needed", u)
	}
	p.Path = "/" + name
	p.RawPath = ""
	return p.String(), nil
}

// newPodsvc prepares (but does not start) a podsvc of its own: builds the
// binary unless one is given, creates the database. It pushes orders to
// the store platform at platformURL.
func newPodsvc(ctx context.Context, o options, run string, allowTargets []string, platformURL string) (*podsvc, error) {
	tmp, err := os.MkdirTemp("", "podbench-"+run+"-")
	if err != nil {
		return nil, err
	}
	p := &podsvc{tmp: tmp, dataDir: filepath.Join(tmp, "data"), logPath: filepath.Join(tmp, "podsvc.log"), name: "podsvc",
		dbName: "podbench_" + run, redisURL: o.redisURL, redisPrefix: "podbench:" + run + ":"}
	if o.kafkaBrokers != "" {
		for _, b := range strings.Split(o.kafkaBrokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				p.kafkaBrokers = append(p.kafkaBrokers, b)
			}
		}
		p.kafkaPrefix = "podbench." + run + "."
	}
	if p.addr, err = loopback.FreeAddr(); err != nil {
		return p, err
	}
	if p.dbURL, err = withDatabase(o.databaseURL, p.dbName); err != nil {
		return p, err
	}
	if p.adminURL, err = withDatabase(o.databaseURL, "postgres"); err != nil {
		return p, err
	}
	p.bin = o.podsvcBin
	if p.bin == "" {
		root, err := moduleRoot()
		if err != nil {
			return p, err
		}
		p.bin = filepath.Join(tmp, "podsvc")
		say("building podsvc (go build -o %s ./cmd/podsvc)", p.bin)
		build := exec.CommandContext(ctx, "go", "build", "-o", p.bin, "./cmd/podsvc")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return p, fmt.Errorf("go build ./cmd/podsvc: %w", err)
		}
	}
	if err := p.createDatabase(ctx); err != nil {
		return p, err
	}
	set := map[string]string{
		"POD_ENV":                   "development",
		"POD_HTTP_ADDR":             p.addr,
		"DATABASE_URL":              p.dbURL,
		"REDIS_URL":                 p.redisURL,
		"POD_REDIS_PREFIX":          p.redisPrefix,
		"POD_DATA_DIR":              p.dataDir,
		"POD_DEMO_TOKEN":            o.token,
		"POD_ROLES":                 o.roles,
		"POD_RATE_LIMIT":            "1000000",
		"POD_RATE_BURST":            "1000000",
		"POD_WEBHOOK_ALLOW_TARGETS": strings.Join(allowTargets, ","),
		"POD_PLATFORM_URL":          platformURL,
		"KAFKA_BROKERS":             strings.Join(p.kafkaBrokers, ","),
		"POD_KAFKA_TOPIC_PREFIX":    p.kafkaPrefix,
		"POD_KAFKA_GROUP_PREFIX":    p.kafkaPrefix,
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours || strings.HasPrefix(k, "POD_") {
			continue
		}
		p.env = append(p.env, kv)
	}
	for k, v := range set {
		p.env = append(p.env, k+"="+v)
	}
	for _, kv := range o.podsvcEnv { // last wins
		k, _, _ := strings.Cut(kv, "=")
		p.env = slices.DeleteFunc(p.env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		p.env = append(p.env, kv)
	}
	return p, nil
}

func (p *podsvc) base() string { return "http://" + p.addr }

// kafkaDesc says which Kafka p uses, for the log.
func (p *podsvc) kafkaDesc() string {
	if len(p.kafkaBrokers) == 0 {
		return "embedded Kafka"
	}
	return fmt.Sprintf("Kafka %s, prefix %q", strings.Join(p.kafkaBrokers, ","), p.kafkaPrefix)
}

// newReplica prepares podsvc number n (2, 3, …) of the run: the same
// binary, database, Redis prefix and Kafka topics and groups as p, with an
// address, data dir and log of its own.
func (p *podsvc) newReplica(n int) (*podsvc, error) {
	name := fmt.Sprintf("podsvc-%d", n)
	r := &podsvc{bin: p.bin, tmp: filepath.Join(p.tmp, name), name: name, replica: true,
		dbURL: p.dbURL, dbName: p.dbName, adminURL: p.adminURL, redisURL: p.redisURL, redisPrefix: p.redisPrefix,
		kafkaBrokers: p.kafkaBrokers, kafkaPrefix: p.kafkaPrefix}
	r.dataDir, r.logPath = filepath.Join(r.tmp, "data"), filepath.Join(r.tmp, "podsvc.log")
	if err := os.MkdirAll(r.tmp, 0o755); err != nil {
		return nil, err
	}
	var err error
	if r.addr, err = loopback.FreeAddr(); err != nil {
		return nil, err
	}
	for _, kv := range p.env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "POD_HTTP_ADDR":
			kv = k + "=" + r.addr
		case "POD_DATA_DIR":
			kv = k + "=" + r.dataDir
		}
		r.env = append(r.env, kv)
	}
	return r, nil
}

func (p *podsvc) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.adminURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{p.dbName}.Sanitize())
	return err
}

// start runs the binary and waits until /readyz answers 200.
func (p *podsvc) start(ctx context.Context) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	cmd.Dir = p.tmp
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (a terminal's ^C reaches podbench only, which
	// stops podsvc in order), and killed with podbench if podbench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start podsvc: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
	alive := func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s exited during start (%s); last log lines:\n%s", p.name, cmd.ProcessState, p.logTail(20))
		default:
			return nil
		}
	}
	return waitReady(ctx, p.base(), 90*time.Second, alive)
}

func (p *podsvc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *podsvc) kill9() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-exited
	return nil
}

// stop asks podsvc to stop (SIGTERM) and kills it after grace.
func (p *podsvc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		say("%s did not stop within %s; killing it", p.name, grace)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// logTail returns the last n lines of podsvc's log.
func (p *podsvc) logTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// cleanup stops podsvc and, unless keep, drops its database, deletes its
// Redis keys and Kafka topics and groups, and removes the temp dir. After a
// failed run the log is saved next to the temp dir first. A replica only
// stops and saves its log: the first podsvc's cleanup (run last) removes
// what they share.
func (p *podsvc) cleanup(keep, failed bool) {
	p.stop(30 * time.Second)
	if failed && !keep {
		saved := p.tmp + "." + p.name + ".log"
		if p.replica {
			saved = filepath.Dir(p.tmp) + "." + p.name + ".log"
		}
		if raw, err := os.ReadFile(p.logPath); err == nil && os.WriteFile(saved, raw, 0o644) == nil {
			say("%s log saved to %s", p.name, saved)
		}
	}
	if p.replica {
		return
	}
	if keep {
		say("kept: data dir %s, database %s, Redis prefix %q, log %s", p.dataDir, p.dbURL, p.redisPrefix, p.logPath)
		if p.kafkaPrefix != "" {
			say("kept: Kafka topics and groups %s* on %s", p.kafkaPrefix, strings.Join(p.kafkaBrokers, ","))
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.kafkaPrefix != "" {
		if topics, groups, err := kafka.DropPrefixed(ctx, p.kafkaBrokers, p.kafkaPrefix); err != nil {
			say("could not delete Kafka topics and groups %s*: %v", p.kafkaPrefix, err)
		} else {
			say("deleted %d Kafka topics and %d groups %s*", topics, groups, p.kafkaPrefix)
		}
	}
	if conn, err := pgx.Connect(ctx, p.adminURL); err == nil {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{p.dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
			say("could not drop database %s: %v", p.dbName, err)
		}
		conn.Close(ctx)
	} else {
		say("could not drop database %s: %v", p.dbName, err)
	}
	if n, err := deleteRedisPrefix(ctx, p.redisURL, p.redisPrefix); err != nil {
		say("could not delete Redis keys %s*: %v", p.redisPrefix, err)
	} else if n > 0 {
		say("deleted %d Redis keys %s*", n, p.redisPrefix)
	}
	if err := os.RemoveAll(p.tmp); err != nil {
		say("could not remove %s: %v", p.tmp, err)
	}
}

func deleteRedisPrefix(ctx context.Context, redisURL, prefix string) (int, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		n += len(batch)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	return n, flush()
}
