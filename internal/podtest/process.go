package podtest

import (
	"os"
	"syscall"
	"time"
)

// Terminate stops a child process as an operator would: SIGTERM, then
// SIGKILL if it has not exited (exited is closed) within grace. It returns
// once the process has exited, and reports whether it had to be killed.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) (killed bool) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return false
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
		return true
	}
}
