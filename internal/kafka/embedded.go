package kafka

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Embedded is the in-process Kafka-protocol broker. Its log lives on disk under
// dataDir, so a restart of the process loses nothing that was acknowledged.
type Embedded struct {
	cluster  *kfake.Cluster
	lock     *os.File
	addrFile string
	addr     string
}

// ErrDataDirBusy means another process already runs a broker on the data dir.
var ErrDataDirBusy = errors.New("embedded kafka: data directory is in use by another process")

// StartEmbedded starts a one-broker cluster persisting into dataDir, listening
// on 127.0.0.1:port (0 picks a free port), and writes its address to addrFile.
// The data directory is locked for the life of the broker.
func StartEmbedded(dataDir string, port int, addrFile string) (*Embedded, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded kafka: create %s: %w", dataDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dataDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka: open lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w (%s)", ErrDataDirBusy, dataDir)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DataDir(dataDir),
		kfake.ClusterID("podsvc-embedded"),
		// Consumers that restart quickly rejoin without waiting out a long session.
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.MaxVersions(embeddedVersions()),
	}
	if port != 0 {
		opts = append(opts, kfake.Ports(port))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded kafka: start: %w", err)
	}
	e := &Embedded{cluster: cluster, lock: lock, addrFile: addrFile, addr: cluster.ListenAddrs()[0]}
	if addrFile != "" {
		if err := writeFileAtomic(addrFile, []byte(e.addr+"\n")); err != nil {
			e.Close()
			return nil, fmt.Errorf("embedded kafka: write address file: %w", err)
		}
	}
	return e, nil
}

// embeddedVersions are the request versions the embedded broker offers:
// all it implements but DescribeTopicPartitions (key 75). kfake answers it
// without the eligible-leader-replica lists, which Apache Kafka's admin
// client (4.x) cannot read: its kafka-consumer-groups and kafka-topics
// failed with a NullPointerException against the embedded broker. Without
// the key offered, Java clients describe topics through Metadata, as they
// do with older brokers; our own clients never use it.
func embeddedVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(75, -1)
	return v
}

// Addr is the broker's host:port.
func (e *Embedded) Addr() string { return e.addr }

// Close stops the broker (flushing its log to disk), removes the address file
// and releases the data directory.
func (e *Embedded) Close() {
	e.cluster.Close()
	if e.addrFile != "" {
		if b, err := os.ReadFile(e.addrFile); err == nil && string(b) == e.addr+"\n" {
			os.Remove(e.addrFile)
		}
	}
	e.lock.Close()
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
