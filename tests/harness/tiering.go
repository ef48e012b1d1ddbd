package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/tlsconfig"
)

const tieringPkg = "github.com/strata-mq/strata/services/tiering/cmd/strata-tiering"

// TieringConfig sets up StartTieredCluster. Zero fields take the defaults
// named on each.
type TieringConfig struct {
	// TierInterval is the storage nodes' --tier-interval: how often they
	// upload sealed segments and delete tiered local ones. Default 500ms.
	TierInterval time.Duration
	// Args are extra strata-tiering flags, like --fault-upload-delay.
	Args []string
	// S3Proxy puts a Proxy between strata-tiering and its embedded S3
	// server (Tiering.S3Proxy): tiering reaches the bucket through it
	// (--s3-endpoint), so a test can slow or break the object store.
	// Default off.
	S3Proxy bool
}

// Tiering is the tiering service of a tiered cluster, with its embedded S3
// server in the same process.
type Tiering struct {
	*Node
	// S3URL is the embedded S3 server's base URL (path-style, bucket
	// "strata", key prefix "strata").
	S3URL string
	// S3Proxy is the proxy tiering reaches S3 through
	// (TieringConfig.S3Proxy); nil otherwise.
	S3Proxy *Proxy

	http *http.Client // Client's: the harness's, or storage node 1's in a secure cluster
}

// StartTieredCluster starts a Cluster (see StartCluster) whose storage
// nodes run with --tiering pointing at a strata-tiering process, then that
// process with --embedded-s3-listen and --embedded-s3-dir and --controller
// naming the cluster's controllers, and waits for its /readyz. Storage
// nodes start before tiering exists; they keep local segments until it
// answers. In a secure cluster (cfg.Secure) tiering runs as tiering-1 with
// the security flags, and the storage nodes reach it over https://. The
// tiering ports are chosen before the cluster starts, since
// the storage nodes name them; when one is taken before strata-tiering
// binds it, the whole cluster is started again on new ports (up to three
// attempts).
func StartTieredCluster(t testing.TB, cfg ClusterConfig, tcfg TieringConfig) (*Cluster, *Tiering) {
	t.Helper()
	if tcfg.TierInterval == 0 {
		tcfg.TierInterval = 500 * time.Millisecond
	}
	bin := Binary(t, tieringPkg)
	for attempt := 1; ; attempt++ {
		c, tr, err := tryStartTieredCluster(t, cfg, tcfg, bin)
		if err == nil {
			return c, tr
		}
		for _, n := range slices.Concat(c.controllers, c.storage) {
			n.Proc.Kill()
		}
		if errors.Is(err, errPortInUse) && attempt < 3 {
			t.Logf("harness: attempt %d: %v; starting again on other ports", attempt, err)
			continue
		}
		t.Fatalf("harness: start tiering: %v", err)
	}
}

func tryStartTieredCluster(t testing.TB, cfg ClusterConfig, tcfg TieringConfig, bin string) (*Cluster, *Tiering, error) {
	ports, err := FreePorts(t, 3)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	scheme := "http://"
	if cfg.Secure {
		scheme = "https://"
	}
	cfg.Tiering, cfg.TierInterval = scheme+addr(0), tcfg.TierInterval
	c := StartCluster(t, cfg)
	dir := filepath.Join(t.TempDir(), "tiering")
	n := &Node{Service: "tiering", ID: 1, URL: c.scheme() + addr(0), AdminURL: c.scheme() + addr(1), DataDir: dir, c: c}
	spec := launch.Tiering{
		Process:          c.process(bin, addr(0), addr(1), tlsconfig.RoleTiering, 1),
		EmbeddedS3Listen: addr(2),
		EmbeddedS3Dir:    filepath.Join(dir, "s3"),
		SpoolDir:         dir,
		Controllers:      c.ControllerURLs(),
	}
	spec.Extra = slices.Clone(tcfg.Args)
	var proxy *Proxy
	if tcfg.S3Proxy {
		proxy = StartProxy(t, addr(2))
		spec.Extra = append(spec.Extra, "--s3-endpoint", "http://"+proxy.Addr(), "--s3-path-style", "--s3-create-bucket",
			"--s3-access-key", "strata", "--s3-secret-key", "strata")
	}
	if err := os.MkdirAll(filepath.Join(dir, "s3"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.start(n, "tiering", spec.Argv())
	if err := n.waitReady(c.cfg.ReadyTimeout); err != nil {
		n.Proc.Kill()
		return c, nil, err
	}
	c.services = append(c.services, n)
	tr := &Tiering{Node: n, S3URL: "http://" + addr(2), S3Proxy: proxy, http: c.http}
	if c.Secure() {
		// Tiering serves Strata services only (a user, even the admin, is
		// refused), so the harness asks it as its usual caller, a storage
		// node.
		tr.http = c.HTTPClientAs(c.ServiceCert(tlsconfig.RoleStorage, "1"))
	}
	return c, tr, nil
}

// Client is a Connect client for the tiering service; in a secure
// cluster it calls as storage node 1 (tiering serves only services).
func (tr *Tiering) Client() tieringv1connect.TieringServiceClient {
	return tieringv1connect.NewTieringServiceClient(tr.http, tr.URL)
}

// State returns the tiering service's state of one partition.
func (tr *Tiering) State(ctx context.Context, topic string, partition int32) (*tieringv1.TieredPartitionState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := tr.Client().GetTieredState(ctx, connect.NewRequest(&tieringv1.GetTieredStateRequest{
		Partitions: []*commonv1.TopicPartition{{Topic: topic, Partition: partition}},
	}))
	if err != nil {
		return nil, err
	}
	if len(resp.Msg.GetPartitions()) != 1 {
		return nil, fmt.Errorf("tiered state of %s-%d: %d entries in answer", topic, partition, len(resp.Msg.GetPartitions()))
	}
	st := resp.Msg.GetPartitions()[0]
	if st.GetError() != nil {
		return nil, fmt.Errorf("tiered state of %s-%d: %v %s", topic, partition, st.GetError().GetReason(), st.GetError().GetMessage())
	}
	return st, nil
}

// WaitTieredEnd waits until the tier holds a partition at least up to
// (excluding) end and returns its state; it fails the test with the last
// state seen when ctx ends first.
func (tr *Tiering) WaitTieredEnd(ctx context.Context, topic string, partition int32, end int64) *tieringv1.TieredPartitionState {
	tr.c.t.Helper()
	var last string
	for {
		st, err := tr.State(ctx, topic, partition)
		if err == nil && st.GetTieredEndOffset() >= end {
			return st
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("tiered [%d, %d) in %d objects", st.GetLogStartOffset(), st.GetTieredEndOffset(), st.GetObjectCount())
		}
		select {
		case <-ctx.Done():
			tr.c.t.Fatalf("harness: %s-%d: waiting for the tier to reach %d: %v; last %s", topic, partition, end, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Segments lists every manifest entry of a partition, following pages.
func (tr *Tiering) Segments(ctx context.Context, topic string, partition int32) ([]*tieringv1.SegmentEntry, error) {
	var out []*tieringv1.SegmentEntry
	token := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := tr.Client().ListSegments(cctx, connect.NewRequest(&tieringv1.ListSegmentsRequest{
			Topic: topic, Partition: partition, PageToken: token,
		}))
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Msg.GetSegments()...)
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// ObjectSize returns the size of an object in the embedded S3 bucket by
// key (as a manifest entry names it), or -1 when it does not exist.
func (tr *Tiering) ObjectSize(ctx context.Context, key string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, tr.S3URL+"/strata/"+key, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.ContentLength, nil
	case http.StatusNotFound:
		return -1, nil
	}
	return 0, fmt.Errorf("HEAD %s: %s", key, resp.Status)
}
