package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/serve"
)

// topicInfo is what tiering needs to know about a topic. Read-only once
// built: Configs may be shared with the metadata view.
type topicInfo struct {
	ID         string
	Partitions int32
	// Configs are the topic's effective configs (the controller's
	// topicconfig.Effective: overrides over the defaults, every key).
	Configs map[string]string
}

// topics is what tiering knows of the cluster's topics, from one source:
//
//   - with --controller, the controllers' WatchMetadata stream followed
//     through lib/metaview (metadata_watch.go): a snapshot, then deltas,
//     nothing while nothing changes;
//   - with --gateway only, which has no metadata stream, DescribeTopics
//     polled every 2 s (metadata_poll.go);
//   - with neither, nothing: every topic is unknown but allowed.
//
// Safe for concurrent use.
type topics struct {
	logger *slog.Logger

	// The watch (--controller); view is nil otherwise.
	view  *metaview.Cache      // the latest view of the stream
	watch metaview.WatchConfig // how runWatch follows it
	// catchUp bounds lookup's wait for the view to show a name it lacks;
	// 0 means defaultCatchUp.
	catchUp time.Duration

	// The poll (--gateway only); describe is nil otherwise.
	describe func(ctx context.Context) ([]*controllerv1.TopicDescription, error)
	interval time.Duration // between polls
	mu       sync.Mutex    // guards loaded, byName and lastTry
	loaded   bool          // a poll has succeeded
	byName   map[string]*topicInfo
	lastTry  time.Time // when the last poll started
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
		t.watchControllers(clients, controllers)
	case len(gateways) > 0:
		t.pollGateway(client, gateways[0], opts)
	}
	return t
}

// run follows the source until ctx ends; it returns at once without one.
func (t *topics) run(ctx context.Context) {
	ctx = serve.Untraced(ctx) // neither the watch nor the poll starts traces
	switch {
	case t.view != nil:
		t.runWatch(ctx)
	case t.describe != nil:
		t.runPoll(ctx)
	}
}

// lookup returns a topic's info; known is false only when metadata has
// loaded and the topic is not in it. A topic created a moment ago is
// found: a name missing from the view waits (at most catchUp) for the
// view to show it; a name missing from the poll triggers one early poll,
// at most every 500ms. For the request handlers, whose callers may have
// just learned of a topic; the background rounds use current.
func (t *topics) lookup(ctx context.Context, name string) (ti *topicInfo, known bool) {
	switch {
	case t.view != nil:
		return t.lookupWatched(ctx, name)
	case t.describe != nil:
		return t.lookupPolled(ctx, name)
	}
	return nil, true
}

// current returns what is known of a topic now, without waiting or
// asking anyone: nil when the topic is absent or nothing has loaded yet.
// For the retention and compaction rounds, which visit every partition
// in the bucket, deleted topics' included, and come back next round.
func (t *topics) current(name string) *topicInfo {
	switch {
	case t.view != nil:
		if v := t.view.Load(); v != nil {
			return infoOf(v, name)
		}
	case t.describe != nil:
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.byName[name]
	}
	return nil
}
