package server

import (
	"context"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/metaview"
)

// Security in the coordinator (docs/design/coordinator.md, "Security"):
// every CoordinatorService RPC asks the guard (Options.Guard) before it
// touches a group, with Kafka's rules: read on the group to join, leave
// and commit, describe to see it, delete to delete it, and read or
// describe on each topic whose offsets a request commits, resets or
// fetches. The users, ACLs and quotas come from the controllers' metadata
// stream (--controller). The gateway calls under its service identity,
// which every check allows, after checking its own caller.

// watchSecurity follows the controllers' metadata stream into c.view and
// hands the guard the users, ACLs and quotas whenever the controller
// sends new ones. It runs until ctx ends.
func (c *Coordinator) watchSecurity(ctx context.Context, urls []string, httpc connect.HTTPClient, opts []connect.ClientOption) {
	clients := make([]controllerv1connect.ControllerServiceClient, len(urls))
	for i, u := range urls {
		clients[i] = controllerv1connect.NewControllerServiceClient(httpc, u, opts...)
	}
	var applied *commonv1.SecurityState // Notify runs on Watch's goroutine only
	metaview.Watch(ctx, c.view, metaview.WatchConfig{
		Controllers: clients,
		Names:       urls,
		NodeID:      metaview.NotANode,
		Logger:      c.log,
		Notify: func(v *metaview.View) {
			if v.Security != applied {
				applied = v.Security
				c.guard.Apply(v.Security)
			}
		},
	})
}

// metadataView is the controllers' metadata as last seen, for the Kafka
// listener's Metadata answers; nil without --controller or before the
// first snapshot.
func (c *Coordinator) metadataView() *metaview.View {
	if c.view == nil {
		return nil
	}
	return c.view.Load()
}

// authorizeGroup allows the request of ctx to do op to group id, or
// returns PERMISSION_DENIED. An empty id passes: acquire refuses it as
// INVALID_ARGUMENT, which says more.
func (c *Coordinator) authorizeGroup(ctx context.Context, op acl.Operation, id string) error {
	if id == "" {
		return nil
	}
	return c.guard.Authorize(ctx, op, acl.Group, id)
}

// authorizeTxn allows the request of ctx to do op to transactional id
// id (Kafka's TransactionalId resource), or returns PERMISSION_DENIED
// with REASON_TRANSACTIONAL_ID_AUTHORIZATION_FAILED. An empty id passes:
// the handler refuses it as INVALID_ARGUMENT, which says more.
func (c *Coordinator) authorizeTxn(ctx context.Context, op acl.Operation, id string) error {
	if id == "" {
		return nil
	}
	return c.guard.Authorize(ctx, op, acl.TransactionalID, id)
}

// authorizeTopics allows the request of ctx to do op to every topic of
// names, or returns the PERMISSION_DENIED of the first it may not.
func (c *Coordinator) authorizeTopics(ctx context.Context, op acl.Operation, names []string) error {
	for _, n := range names {
		if err := c.guard.Authorize(ctx, op, acl.Topic, n); err != nil {
			return err
		}
	}
	return nil
}

// topicRefusals answers, topic by topic, whether the request of ctx may
// do op, asking the guard once per topic: a commit names the same topic
// for many partitions.
type topicRefusals struct {
	c    *Coordinator
	ctx  context.Context
	op   acl.Operation
	seen map[string]*commonv1.ErrorDetail
}

func (c *Coordinator) topicRefusals(ctx context.Context, op acl.Operation) *topicRefusals {
	return &topicRefusals{c: c, ctx: ctx, op: op, seen: map[string]*commonv1.ErrorDetail{}}
}

// of returns the PERMISSION_DENIED detail for a partition of topic, nil
// when the request may do the operation.
func (r *topicRefusals) of(topic string) *commonv1.ErrorDetail {
	d, ok := r.seen[topic]
	if !ok {
		if err := r.c.guard.Authorize(r.ctx, r.op, acl.Topic, topic); err != nil {
			d = apierr.AsDetail(err)
		}
		r.seen[topic] = d
	}
	return d
}

// hiddenTopics are the topics of a member's subscription its principal
// may not describe: the state machine leaves them out of its assignment
// (group.Heartbeat.Hidden), as Kafka's consumers never see such topics in
// their metadata. They are asked again at every heartbeat, so a grant or
// a revoke moves partitions within a heartbeat interval.
func (c *Coordinator) hiddenTopics(ctx context.Context, topics []string) []string {
	var out []string
	for _, t := range topics {
		if !c.guard.Allowed(ctx, acl.Describe, acl.Topic, t) {
			out = append(out, t)
		}
	}
	return out
}
