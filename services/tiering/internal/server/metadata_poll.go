package server

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
)

// The poll: with --gateway only, tiering polls the gateway's
// DescribeTopics every 2 s (t.interval); a gateway has no metadata
// stream to follow.

// pollGateway makes t poll a gateway's DescribeTopics.
func (t *topics) pollGateway(client *http.Client, url string, opts []connect.ClientOption) {
	c := gatewayv1connect.NewGatewayServiceClient(client, url, opts...)
	t.describe = func(ctx context.Context) ([]*controllerv1.TopicDescription, error) {
		res, err := c.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetTopics(), nil
	}
}

// runPoll polls every t.interval until ctx ends.
func (t *topics) runPoll(ctx context.Context) {
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

// lookupPolled answers lookup from the last poll. An unknown name
// triggers one early poll at most every 500ms, so a topic created a
// moment ago is found.
func (t *topics) lookupPolled(ctx context.Context, name string) (ti *topicInfo, known bool) {
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
