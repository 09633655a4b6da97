// Command podctl is the operator CLI: accounts, tokens, catalog imports,
// dead letters, webhook secret resealing (see README). It reads
// DATABASE_URL, KAFKA_BROKERS and POD_DATA_DIR like podsvc; with no
// KAFKA_BROKERS it reaches the embedded broker of a podsvc running on the
// same POD_DATA_DIR.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pg"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "podctl",
		Short:         "Operator commands for the print-on-demand order service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(accountCmd(), tokenCmd(), catalogCmd(), fulfillmentCmd(), replayCmd(), dlqCmd(), webhooksCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "podctl:", err)
		os.Exit(1)
	}
}

// env is what every subcommand connects to.
type env struct {
	cfg     config.Config
	pool    *pgxpool.Pool
	kafka   *kgo.Client // set by openKafkaEnv
	brokers []string    // set by openKafkaEnv
}

func openEnv(ctx context.Context) (*env, error) {
	cfg, err := config.FromEnv(nil)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	pool, err := pg.OpenMigrated(ctx, cfg.DatabaseURL, 8)
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, pool: pool}, nil
}

func (e *env) close() {
	if e.kafka != nil {
		e.kafka.Close()
	}
	e.pool.Close()
}

// openKafkaEnv is openEnv plus a client of KAFKA_BROKERS or of the running
// embedded broker.
func openKafkaEnv(ctx context.Context) (*env, error) {
	e, err := openEnv(ctx)
	if err != nil {
		return nil, err
	}
	brokers, err := kafka.ResolveBrokers(e.cfg.KafkaBrokers, e.cfg.KafkaAddrFile())
	if err == nil {
		e.brokers = brokers
		// A record not on the log within produceWait fails the command
		// (Kafka unreachable): with no such bound, a publish, an import
		// or a dead letter's replay waited for good, saying nothing.
		e.kafka, err = kafka.NewProducer(brokers, kgo.ClientID("podctl"), kgo.RecordDeliveryTimeout(produceWait))
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// produceWait bounds how long podctl waits for a record it produces to
// be on the log.
const produceWait = 30 * time.Second

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
