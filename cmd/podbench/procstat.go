package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go runs on).
const userHZ = 100

// cpuTicks reads utime+stime of a process from /proc/<pid>/stat.
func cpuTicks(pid string) (uint64, error) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: unexpected format", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: unexpected format", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: unexpected format", pid)
	}
	return ut + st, nil
}

// memKiB reads VmRSS and VmHWM (peak RSS) from /proc/<pid>/status.
func memKiB(pid int) (rss, hwm uint64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, sc.Err()
}

// hostTicks reads the busy and total jiffies of all CPUs from /proc/stat.
func hostTicks() (busy, total uint64, err error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected format")
	}
	for i, s := range f[1:] {
		n, _ := strconv.ParseUint(s, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// procSampler samples the CPU and RSS of podsvc (of every podsvc process,
// with replicas), the host's and podbench's own CPU every second between
// begin and end. A pid may change (a restart after kill -9); CPU is counted
// per process, from each one's first sample on.
type procSampler struct {
	pidsOf func() []int

	mu       sync.Mutex
	on       bool
	lastTick map[int]uint64 // per pid, the ticks of its last sample
	svcTicks uint64         // podsvc CPU ticks during the window, all processes
	peakKiB  uint64         // the largest single process
	t0       time.Time
	t1       time.Time
	self0    uint64
	self1    uint64
	host0    [2]uint64
	host1    [2]uint64
	samples  int
}

func newProcSampler(pidsOf func() []int) *procSampler { return &procSampler{pidsOf: pidsOf} }

func (s *procSampler) run(ctx context.Context) { everySecond(ctx, s.sample) }

// everySecond calls f once a second until ctx ends.
func everySecond(ctx context.Context, f func()) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// begin starts the measured window.
func (s *procSampler) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on, s.t0 = true, time.Now()
	s.self0, _ = cpuTicks("self")
	b, t, _ := hostTicks()
	s.host0 = [2]uint64{b, t}
	s.lastTick = map[int]uint64{}
	s.sampleLocked()
}

// end closes the measured window.
func (s *procSampler) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampleLocked()
	s.on, s.t1 = false, time.Now()
	s.self1, _ = cpuTicks("self")
	b, t, _ := hostTicks()
	s.host1 = [2]uint64{b, t}
}

func (s *procSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.sampleLocked()
	}
}

func (s *procSampler) sampleLocked() {
	seen := false
	for _, pid := range s.pidsOf() {
		if pid <= 0 {
			continue
		}
		ticks, err := cpuTicks(strconv.Itoa(pid))
		if err != nil {
			delete(s.lastTick, pid)
			continue
		}
		if last, ok := s.lastTick[pid]; ok && ticks >= last {
			s.svcTicks += ticks - last
		}
		s.lastTick[pid] = ticks
		if rss, hwm, err := memKiB(pid); err == nil {
			s.peakKiB = max(s.peakKiB, rss, hwm) // VmHWM: the peak between samples
		}
		seen = true
	}
	if seen {
		s.samples++
	}
}

// procReport is the sampler's result; zero values when nothing was sampled.
type procReport struct {
	Sampled       bool
	CPUCores      float64 // podsvc (all processes), mean over the window
	RSSMiB        float64 // podsvc, peak of the largest process
	HostBusyCores float64
	HostCores     int
	SelfCores     float64
}

func (s *procSampler) report() procReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	wall := s.t1.Sub(s.t0).Seconds()
	if wall <= 0 {
		return procReport{}
	}
	r := procReport{HostCores: runtime.NumCPU()}
	r.SelfCores = float64(s.self1-s.self0) / userHZ / wall
	if dt := s.host1[1] - s.host0[1]; dt > 0 {
		r.HostBusyCores = float64(s.host1[0]-s.host0[0]) / float64(dt) * float64(r.HostCores)
	}
	if s.samples > 0 && s.peakKiB > 0 {
		r.Sampled = true
		r.CPUCores = float64(s.svcTicks) / userHZ / wall
		r.RSSMiB = float64(s.peakKiB) / 1024
	}
	return r
}
