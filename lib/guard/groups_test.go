package guard

import (
	"context"
	"slices"
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/authn"
)

// TestDescribableGroup: a caller that may describe the group but not
// topic audit sees no lag row, subscription or assignment of audit; a
// super user sees all of it.
func TestDescribableGroup(t *testing.T) {
	g, err := New(context.Background(), Config{RequireAuth: true, SuperUsers: []acl.Principal{acl.User("admin")}})
	if err != nil {
		t.Fatal(err)
	}
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		BindingToProto(acl.Binding{Principal: acl.User("alice"), Permission: acl.Allow, Operation: acl.Read, ResourceType: acl.Topic, ResourceName: "orders", PatternType: acl.Literal}),
	}})
	group := func() *coordinatorv1.GroupDescription {
		return &coordinatorv1.GroupDescription{
			Members: []*coordinatorv1.GroupMember{{
				MemberId: "m1", SubscribedTopicNames: []string{"orders", "audit"},
				Assignment: &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{
					{Topic: "orders", Partitions: []int32{0, 1}}, {Topic: "audit", Partitions: []int32{0}}}},
				TargetAssignment: &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{{Topic: "audit", Partitions: []int32{0}}}},
			}},
			Partitions: []*coordinatorv1.PartitionLag{
				{Topic: "audit", Partition: 0, Lag: 900},
				{Topic: "orders", Partition: 0, Lag: 2},
				{Topic: "orders", Partition: 1, Lag: 3},
			},
		}
	}
	as := func(name string) context.Context {
		return authn.NewContext(context.Background(), authn.Info{Principal: acl.User(name), Method: authn.MethodToken})
	}
	got := g.DescribableGroup(as("alice"), group())
	m := got.GetMembers()[0]
	if len(got.GetPartitions()) != 2 || slices.ContainsFunc(got.GetPartitions(), func(p *coordinatorv1.PartitionLag) bool { return p.GetTopic() != "orders" }) ||
		!slices.Equal(m.GetSubscribedTopicNames(), []string{"orders"}) ||
		len(m.GetAssignment().GetPartitions()) != 1 || m.GetAssignment().GetPartitions()[0].GetTopic() != "orders" ||
		len(m.GetTargetAssignment().GetPartitions()) != 0 {
		t.Fatalf("alice's view of the group: %v", got)
	}
	if got := g.DescribableGroup(as("admin"), group()); len(got.GetPartitions()) != 3 || len(got.GetMembers()[0].GetSubscribedTopicNames()) != 2 {
		t.Fatalf("the super user's view of the group: %v", got)
	}
}
