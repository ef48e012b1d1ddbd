package server

import (
	"context"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// OffsetDelete implements CoordinatorService: Kafka's OffsetDelete
// (KIP-496, GroupCoordinator.handleDeleteOffsets). A group without live
// members loses the named offsets; a group with live members keeps those
// of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and
// loses the others; a classic group of another protocol type than
// consumer has opaque subscriptions, so with live members it refuses the
// whole request (NON_EMPTY_GROUP), as Kafka does.
func (c *Coordinator) OffsetDelete(ctx context.Context, req *connect.Request[coordinatorv1.OffsetDeleteRequest]) (*connect.Response[coordinatorv1.OffsetDeleteResponse], error) {
	id := req.Msg.GetGroupId()
	if err := c.authorizeGroup(ctx, acl.Delete, id); err != nil { // security.go
		return nil, err
	}
	og, err := c.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer og.mu.Unlock()
	ok, err := c.exists(ctx, og)
	if err != nil {
		return nil, errDatabase(err)
	}
	if !ok {
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "group %q does not exist", id)
	}
	subscribed, opaque := og.subscribedTopics()
	if opaque {
		return nil, apierr.New(connect.CodeFailedPrecondition, commonv1.Reason_REASON_GROUP_NOT_EMPTY,
			"group %q has live members of protocol type %q, whose subscriptions Strata cannot read; stop them before deleting its offsets", id, og.cg.ProtocolType)
	}
	read := c.topicRefusals(ctx, acl.Read) // security.go
	out := &coordinatorv1.OffsetDeleteResponse{}
	var del []offsetstore.Offset
	for _, t := range req.Msg.GetTopics() {
		refused := read.of(t.GetTopic())
		for _, p := range t.GetPartitions() {
			r := &coordinatorv1.OffsetDeleteResult{Topic: t.GetTopic(), Partition: p, Error: refused}
			if r.Error == nil && (subscribed == nil || slices.Contains(subscribed, t.GetTopic())) && len(og.g.Members)+og.classicMembers() > 0 {
				r.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_GROUP_SUBSCRIBED_TO_TOPIC,
					Message: "group " + id + " has live members subscribed to topic " + t.GetTopic()}
			}
			if r.Error == nil {
				del = append(del, offsetstore.Offset{Topic: t.GetTopic(), Partition: p})
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	if len(del) > 0 {
		if err := c.fenceErr(ctx, og, c.store.DeleteOffsets(ctx, og.fence, del)); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(out), nil
}

// subscribedTopics are the topics og's live members subscribe to; nil
// with members means every topic (a consumer member's subscription that
// does not decode). opaque is a classic group of another protocol type
// than consumer with members. og.mu is held.
func (og *owned) subscribedTopics() (topics []string, opaque bool) {
	topics = []string{}
	for _, m := range og.g.Members {
		topics = append(topics, m.Topics...)
	}
	if og.cg == nil || len(og.cg.Members) == 0 {
		return topics, false
	}
	if og.cg.ProtocolType != "consumer" {
		return nil, true
	}
	for _, m := range og.cg.Members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.Metadata(og.cg.Protocol)); err != nil {
			return nil, false
		}
		topics = append(topics, md.Topics...)
	}
	return topics, false
}
