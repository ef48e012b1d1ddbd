package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU accounting reads utime+stime of each process from /proc/PID/stat
// (Linux): the cluster's processes come from the cluster.json that
// `strata dev` writes, the load generator's from /proc/self. Dividing the
// CPU a run used by the bytes it moved gives CPU seconds per GB, a cost
// figure that holds up on a machine other work shares better than MB/s
// does.

// clusterProcess is the part of a cluster.json process entry used here
// (field names are the contract in docs/design/dev-cluster.md).
type clusterProcess struct {
	Service      string `json:"service"`
	ID           int    `json:"id"`
	PID          int    `json:"pid"`
	Running      bool   `json:"running"`
	AdminAddress string `json:"admin_address"`
}

type clusterFile struct {
	Processes      []clusterProcess `json:"processes"`
	KafkaBootstrap string           `json:"kafka_bootstrap"`
}

// kafkaBootstrapOf returns the Kafka bootstrap address a cluster.json
// names.
func kafkaBootstrapOf(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var f clusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if f.KafkaBootstrap == "" {
		return "", fmt.Errorf("%s names no kafka_bootstrap: the cluster has no Kafka listener; give --kafka-bootstrap", path)
	}
	return f.KafkaBootstrap, nil
}

// readClusterJSON returns the running processes listed in a cluster.json.
func readClusterJSON(path string) ([]clusterProcess, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f clusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []clusterProcess
	for _, p := range f.Processes {
		if p.Running && p.PID > 0 {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no running process", path)
	}
	return out, nil
}

// clockTicks is the unit of utime and stime in /proc/PID/stat
// (sysconf(_SC_CLK_TCK)), read from the auxiliary vector so no cgo is
// needed; 100, the value on every common Linux build, if it cannot be read.
var clockTicks = func() int64 {
	if t, err := auxvClockTicks("/proc/self/auxv"); err == nil {
		return t
	}
	return 100
}()

// auxvClockTicks finds AT_CLKTCK in an auxiliary vector of native-endian
// 64-bit (type, value) pairs.
func auxvClockTicks(path string) (int64, error) {
	const atNull, atClkTck = 0, 17
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for ; len(b) >= 16; b = b[16:] {
		typ, val := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		if typ == atNull {
			break
		}
		if typ == atClkTck && val > 0 {
			return int64(val), nil
		}
	}
	return 0, errors.New("no AT_CLKTCK in " + path)
}

// procCPU returns the user plus system CPU time a process has used.
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b, clockTicks)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of a
// /proc/PID/stat. The command name (field 2) is in parentheses and may
// itself hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseStatCPU(stat []byte, ticks int64) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat: no ')'")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat: %d fields after the command", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("malformed /proc stat: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / time.Duration(ticks), nil
}

// cpuMeter samples the CPU time of the cluster's processes and of this
// process. Without a cluster.json it measures this process only.
type cpuMeter struct {
	procs []clusterProcess
}

// cpuSample is the CPU time used so far, by service name ("storage",
// "gateway", ...) and by the load generator itself.
type cpuSample struct {
	services map[string]time.Duration
	self     time.Duration
}

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{services: map[string]time.Duration{}}
	for _, p := range m.procs {
		// A process that has gone away (the test stopped it) counts
		// with what it had at the last sample: it stops adding.
		if d, err := procCPU(strconv.Itoa(p.PID)); err == nil {
			s.services[p.Service] += d
		}
	}
	s.self, _ = procCPU("self")
	return s
}

// CPU is the CPU a run used, as written to JSON.
type CPU struct {
	// ClusterSeconds is the CPU time of every cluster process together.
	ClusterSeconds float64 `json:"cluster_seconds"`
	// ClusterPerGB is ClusterSeconds per 1e9 bytes of record values moved.
	ClusterPerGB float64 `json:"cluster_seconds_per_gb"`
	// ClientSeconds and ClientPerGB are the load generator's own.
	ClientSeconds float64 `json:"client_seconds"`
	ClientPerGB   float64 `json:"client_seconds_per_gb"`
	// ByService breaks ClusterSeconds down by service.
	ByService map[string]float64 `json:"by_service,omitempty"`
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// between is the CPU used between two samples, per GB of bytes moved.
// Nil without cluster processes to measure.
func (m *cpuMeter) between(a, b cpuSample, bytes int64) *CPU {
	if len(m.procs) == 0 || bytes <= 0 {
		return nil
	}
	gb := float64(bytes) / 1e9
	c := &CPU{ByService: map[string]float64{}}
	for svc, d := range b.services {
		sec := (d - a.services[svc]).Seconds()
		c.ByService[svc] = sec
		c.ClusterSeconds += sec
	}
	c.ClientSeconds = (b.self - a.self).Seconds()
	c.ClusterPerGB = c.ClusterSeconds / gb
	c.ClientPerGB = c.ClientSeconds / gb
	// The clock ticks are 10 ms: more digits would be noise.
	for svc, sec := range c.ByService {
		c.ByService[svc] = round3(sec)
	}
	c.ClusterSeconds, c.ClientSeconds = round3(c.ClusterSeconds), round3(c.ClientSeconds)
	c.ClusterPerGB, c.ClientPerGB = round3(c.ClusterPerGB), round3(c.ClientPerGB)
	return c
}
