package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/printpod/pod/internal/podtest"
)

// root is the repository root, seen from this package's directory.
var root = filepath.Join("..", "..", "..")

func readRepoFile(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{root}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// process is a child process writing its output to a log file. It is
// stopped when the test ends (SIGTERM, then SIGKILL after 20 s), and the
// tail of its log is shown when the test failed.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func newProcess(t *testing.T, name, logPath string, env []string, bin string, args ...string) *process {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, log: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s log tail (%s):\n%s", name, logPath, b)
		}
	})
	return p
}

// stop ends the process and waits for it; it may be called more than once.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	podtest.Terminate(p.cmd.Process, p.done, 20*time.Second)
}

// running reports an error when the process has ended.
func (p *process) running() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v (log: %s)", p.name, p.err, p.log)
	default:
		return nil
	}
}
