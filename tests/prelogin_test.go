package tests

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// maxAttackGrowth is how much a storage node's resident memory may grow
// under each attack below (docs/security.md, threat table).
const maxAttackGrowth = 64 << 20

// TestPreLoginCostsLittle attacks a storage node of `strata dev --secure`
// and measures what it costs by the node's resident set (VmRSS), not by
// reading code paths:
//   - 30 connections to its Kafka listener, none authenticated, each
//     announcing a 100 MB request and sending 4 MiB of it (Kafka's
//     CVE-2022-34917): refused at the size prefix;
//   - a 1 GiB gzip bomb sent to its Connect API as a Produce by a user
//     with no grants: refused RESOURCE_EXHAUSTED once 8 MiB are
//     decompressed.
//
// Each may grow the node by less than 64 MB.
func TestPreLoginCostsLittle(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--secure", "--storage-nodes", "1")
	ctx := harness.Deadline(t, 4*time.Minute)
	node := d.Process(t, "storage", 1)
	if node.KafkaAddress == "" {
		t.Fatal("storage-1 has no kafka_address in cluster.json")
	}
	caPEM, err := os.ReadFile(d.File.TLSCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in " + d.File.TLSCA)
	}
	tlsConf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	t.Run("30 unauthenticated Kafka connections announcing 100 MB", func(t *testing.T) {
		growth := measureGrowth(t, node.PID, func() {
			var wg sync.WaitGroup
			var refused atomic.Int32
			conns := make([]net.Conn, 30)
			for i := range conns {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", node.KafkaAddress, tlsConf)
				if err != nil {
					t.Fatalf("dial the Kafka listener: %v", err)
				}
				t.Cleanup(func() { c.Close() })
				conns[i] = c
			}
			for _, c := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.SetDeadline(time.Now().Add(2 * time.Minute))
					w := bufio.NewWriter(c)
					w.Write(binary.BigEndian.AppendUint32(nil, 100<<20))
					chunk := make([]byte, 64<<10)
					for range 64 { // 4 MiB of the announced body
						if _, err := w.Write(chunk); err != nil {
							refused.Add(1)
							return
						}
					}
					if err := w.Flush(); err != nil {
						refused.Add(1)
					}
				}()
			}
			wg.Wait()
			t.Logf("%d of 30 connections were closed by the node while sending", refused.Load())
		})
		if growth >= maxAttackGrowth {
			t.Fatalf("the storage node grew by %d MiB under 30 unauthenticated 100 MB announcements; want under %d MiB",
				growth>>20, maxAttackGrowth>>20)
		}
	})

	t.Run("a 1 GiB gzip bomb from a user with no grants", func(t *testing.T) {
		admin := readAdminEnv(t, filepath.Join(d.Dir, "admin.env"))
		var adminEnv []string
		for k, v := range admin {
			adminEnv = append(adminEnv, k+"="+v)
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r := runCLIEnv(cctx, t, d.Strata, adminEnv, "", "user", "create", "nobody")
		if r.code != 0 {
			t.Fatalf("strata user create: exit %d, %s", r.code, r.stderr)
		}
		token := strings.TrimPrefix(strings.TrimSpace(r.stdout), "STRATA_TOKEN=")
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}}
		defer hc.CloseIdleConnections()
		post := func(body []byte, gz bool) (int, string, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, node.URL+"/strata.storage.v1.StorageService/Produce", bytes.NewReader(body))
			if err != nil {
				return 0, "", err
			}
			req.Header.Set("Content-Type", "application/proto")
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("Authorization", "Bearer "+token)
			if gz {
				req.Header.Set("Content-Encoding", "gzip")
			}
			resp, err := hc.Do(req)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return resp.StatusCode, string(msg), nil
		}
		// The node learns the new token from the cluster's metadata: wait
		// until an empty Produce is refused for what it asks, not for
		// who asks.
		testwait.Until(t, 60*time.Second, "the storage node to know the new user's token", func() error {
			code, msg, err := post(nil, false)
			if err != nil {
				return err
			}
			if code == http.StatusUnauthorized || strings.Contains(msg, "unauthenticated") {
				return fmt.Errorf("HTTP %d %s", code, msg)
			}
			return nil
		})
		bomb := gzipBomb(t, 1<<30)
		t.Logf("the bomb: %d KiB of gzip decompressing to 1 GiB", len(bomb)>>10)
		var code int
		var msg string
		growth := measureGrowth(t, node.PID, func() {
			var err error
			if code, msg, err = post(bomb, true); err != nil {
				t.Fatalf("post the bomb: %v", err)
			}
		})
		t.Logf("the bomb was answered HTTP %d %s", code, msg)
		if code != http.StatusTooManyRequests || !strings.Contains(msg, "resource_exhausted") {
			t.Errorf("the bomb was answered HTTP %d %s; want 429 resource_exhausted", code, msg)
		}
		if growth >= maxAttackGrowth {
			t.Fatalf("the storage node grew by %d MiB under a 1 GiB gzip bomb; want under %d MiB", growth>>20, maxAttackGrowth>>20)
		}
	})
}

// gzipBomb returns gzip that decompresses to n zero bytes: one member of
// 64 MiB of zeros, repeated (a gzip reader reads concatenated members as
// one stream, RFC 1952 section 2.2).
func gzipBomb(t *testing.T, n int) []byte {
	t.Helper()
	const member = 64 << 20
	var one bytes.Buffer
	zw, err := gzip.NewWriterLevel(&one, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range member >> 20 {
		zw.Write(zeros)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(one.Bytes(), n/member)
}

// measureGrowth runs attack and returns how far the resident set of
// process pid rose above its level before the attack, sampled every 10ms
// during it and once after.
func measureGrowth(t *testing.T, pid int, attack func()) int64 {
	t.Helper()
	before := vmRSS(t, pid)
	var peak atomic.Int64
	peak.Store(before)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if v, err := readVmRSS(pid); err == nil && v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	attack()
	close(done)
	<-sampled
	if v := vmRSS(t, pid); v > peak.Load() {
		peak.Store(v)
	}
	growth := peak.Load() - before
	t.Logf("storage node pid %d: VmRSS %d MiB before, peak %d MiB: grew %d MiB", pid, before>>20, peak.Load()>>20, growth>>20)
	return growth
}

func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	v, err := readVmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readVmRSS is the VmRSS line of /proc/PID/status, in bytes.
func readVmRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
