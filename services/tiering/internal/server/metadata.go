package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/serve"
)

// topicInfo is what tiering needs to know about a topic.
type topicInfo struct {
	ID         string
	Partitions int32
	Configs    map[string]string
}

// topics follows the cluster's topics by polling DescribeTopics on the
// controller or a gateway. Safe for concurrent use.
type topics struct {
	describe func(ctx context.Context) ([]*controllerv1.TopicDescription, error)
	logger   *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	loaded  bool
	byName  map[string]*topicInfo
	lastTry time.Time
}

func newTopics(cfg *Config, client *http.Client, opts []connect.ClientOption, logger *slog.Logger) *topics {
	t := &topics{logger: logger, interval: 2 * time.Second, byName: map[string]*topicInfo{}}
	// Validate has checked both lists.
	controllers, _ := serve.ParseURLs(cfg.Controller)
	gateways, _ := serve.ParseURLs(cfg.Gateway)
	switch {
	case len(controllers) > 0:
		var clients []controllerv1connect.ControllerServiceClient
		for _, u := range controllers {
			clients = append(clients, controllerv1connect.NewControllerServiceClient(client, u, opts...))
		}
		t.describe = func(ctx context.Context) ([]*controllerv1.TopicDescription, error) {
			var errs []error
			for _, c := range clients {
				res, err := c.DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{}))
				if err == nil {
					return res.Msg.GetTopics(), nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		}
	case len(gateways) > 0:
		c := gatewayv1connect.NewGatewayServiceClient(client, gateways[0], opts...)
		t.describe = func(ctx context.Context) ([]*controllerv1.TopicDescription, error) {
			res, err := c.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{}))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetTopics(), nil
		}
	}
	return t
}

// enabled reports whether a metadata source is configured.
func (t *topics) enabled() bool { return t.describe != nil }

func (t *topics) run(ctx context.Context) {
	if !t.enabled() {
		return
	}
	ctx = serve.Untraced(ctx) // a poll on a timer starts no traces
	for {
		t.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.interval):
		}
	}
}

func (t *topics) refresh(ctx context.Context) {
	t.mu.Lock()
	t.lastTry = time.Now()
	t.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	descs, err := t.describe(cctx)
	if err != nil {
		if ctx.Err() == nil {
			t.logger.Debug("topic metadata unavailable", "err", err)
		}
		return
	}
	m := make(map[string]*topicInfo, len(descs))
	for _, d := range descs {
		ti := &topicInfo{ID: d.GetTopicId(), Partitions: int32(len(d.GetPartitions())), Configs: map[string]string{}}
		for _, c := range d.GetConfigs() {
			ti.Configs[c.GetKey()] = c.GetValue()
		}
		m[d.GetName()] = ti
	}
	t.mu.Lock()
	t.byName, t.loaded = m, true
	t.mu.Unlock()
}

// lookup returns a topic's info; known is false when metadata is loaded and
// the topic is not in it. An unknown name triggers one early refresh at most
// every 500ms, so a topic created a moment ago is found. For the request
// handlers, whose callers may have just learned of a topic; the background
// rounds use current.
func (t *topics) lookup(ctx context.Context, name string) (ti *topicInfo, known bool) {
	if !t.enabled() {
		return nil, true
	}
	t.mu.Lock()
	ti, loaded, last := t.byName[name], t.loaded, t.lastTry
	t.mu.Unlock()
	if ti == nil && time.Since(last) > 500*time.Millisecond {
		t.refresh(ctx)
		t.mu.Lock()
		ti, loaded = t.byName[name], t.loaded
		t.mu.Unlock()
	}
	return ti, ti != nil || !loaded
}

// current returns what is known of a topic now, without asking anyone:
// nil when the topic is absent or nothing has loaded yet. For the
// retention and compaction rounds, which visit every partition in the
// bucket, deleted topics' included, and come back next round.
func (t *topics) current(name string) *topicInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byName[name]
}
