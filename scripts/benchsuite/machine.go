package main

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine describes where the suite ran.
type machine struct {
	Cores     int    `json:"cores"` // logical CPUs
	Model     string `json:"model"` // /proc/cpuinfo "model name"
	MemoryGiB string `json:"memory"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Date      string `json:"date"`
}

// describeMachine reads /proc for the machine's description.
func describeMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.Model = cpuModel(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
						m.MemoryGiB = strconv.FormatFloat(kb/(1<<20), 'f', 1, 64) + " GiB"
					}
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// cpuModel returns the first "model name" of a /proc/cpuinfo text.
func cpuModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg returns /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// gitCommit describes the checked-out commit, noting uncommitted changes in the
// packages the binary is built from.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--", "broker", "event", "delivery", "channel",
		"filter", "config", "cmd", "internal", "loadtest", "go.mod").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " + uncommitted changes (" + strconv.Itoa(len(strings.Split(strings.TrimSpace(string(st)), "\n"))) + " files)"
	}
	return c
}
