package server

import (
	"context"
	"time"

	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/metaview"
)

// The watch: with --controller, tiering follows the controllers'
// WatchMetadata stream through lib/metaview, as storage nodes, gateways
// and coordinators do. The controller sends a snapshot, then one delta
// per change and an empty progress notice every 5 s while nothing
// changes; polling DescribeTopics instead cost it a full etcd load and a
// describe of every topic every 2 s. A broken stream is reopened on the
// next controller with backoff, resuming after the last applied version.
//
// The stream renders topics from the same model as DescribeTopics: the
// topic id, every partition, and the effective configs
// (topicconfig.Effective of the overrides and the replication factor,
// which DescribeTopics turns into its config entries), defaults included.
// One difference: the stream carries internal topics, which
// DescribeTopics without names leaves out, so tiering knows them now
// rather than refusing a storage node's upload of one as an unknown
// topic. The stream also carries nodes and the security state, which
// tiering does not use.

// defaultCatchUp is how long lookup waits, by default, for the view to
// show a name it lacks. The controller publishes a topic in the same
// delta to every watcher, so a caller that has just learned of a topic
// (a storage node, from its own watch) is normally milliseconds ahead of
// tiering's view; a name still missing after this is taken as absent.
const defaultCatchUp = time.Second

// watchControllers makes t follow the controllers' metadata stream.
func (t *topics) watchControllers(clients []controllerv1connect.ControllerServiceClient, names []string) {
	t.view = metaview.NewCache()
	t.watch = metaview.WatchConfig{
		Controllers: clients,
		Names:       names,
		NodeID:      metaview.NotANode,
		Resume:      true,
		Logger:      t.logger,
	}
}

// runWatch feeds t.view until ctx ends.
func (t *topics) runWatch(ctx context.Context) {
	metaview.Watch(ctx, t.view, t.watch)
}

// lookupWatched answers lookup from the view. A name the view lacks is
// looked for again each time the view changes, until it is there or
// catchUp has passed (or ctx ends). The view's version moves with every
// delta, so the wait ends as soon as the delta creating the topic lands;
// a name that stays absent costs its caller the whole catchUp, which only
// the request handlers pay (the background rounds use current). Before
// the first snapshot nothing is known, and a name is not refused.
func (t *topics) lookupWatched(ctx context.Context, name string) (*topicInfo, bool) {
	wait := t.catchUp
	if wait <= 0 {
		wait = defaultCatchUp
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		moved := t.view.Changed() // before Load, so no change slips in between unseen
		v := t.view.Load()
		if v != nil {
			if ti := infoOf(v, name); ti != nil {
				return ti, true
			}
		}
		select {
		case <-moved:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		// A change that came with the deadline is still looked at.
		if v = t.view.Load(); v != nil {
			if ti := infoOf(v, name); ti != nil {
				return ti, true
			}
		}
		return nil, v == nil
	}
}

// infoOf renders a topic of v for tiering, or nil when v lacks it. The
// configs are shared with v, which nobody modifies.
func infoOf(v *metaview.View, name string) *topicInfo {
	tm := v.Topics[name]
	if tm == nil {
		return nil
	}
	return &topicInfo{ID: tm.GetTopicId(), Partitions: int32(len(tm.GetPartitions())), Configs: tm.GetConfigs()}
}
