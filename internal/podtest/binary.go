package podtest

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binary is a command of the module that tests run as a process of its
// own (podsvc to kill it, podctl and podbench as an operator would), built
// at most once per test binary run.
type Binary struct {
	Pkg string // import path, e.g. github.com/printpod/pod/cmd/podsvc

	once sync.Once
	path string
	out  []byte
	err  error
}

// Build returns the binary's path in dir, building it there on first use
// (later calls return the first build, whatever their dir). A failed build
// fails the test with the compiler's output.
func (b *Binary) Build(t testing.TB, dir string) string {
	t.Helper()
	name := filepath.Base(b.Pkg)
	b.once.Do(func() {
		b.path = filepath.Join(dir, name)
		b.out, b.err = exec.Command("go", "build", "-o", b.path, b.Pkg).CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build %s: %v\n%s", name, b.err, b.out)
	}
	return b.path
}
