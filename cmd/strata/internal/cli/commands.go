package cli

import (
	"context"
	"strings"
	"time"

	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// builtin is the command table. To add a top-level command implemented in
// another package, call Register from main before Main; `strata dev` is
// meant to be added that way:
//
//	cli.Register(&cli.Command{Name: "dev", Summary: "run a whole cluster on this machine", Main: devcluster.Main})
func builtin() []*Command {
	return []*Command{
		{Name: "topic", Summary: "create, list, describe, alter and delete topics", Sub: []*Command{
			{Name: "create", Summary: "create a topic", Run: topicCreate},
			{Name: "list", Summary: "list topics", Run: topicList},
			{Name: "describe", Summary: "show a topic's partitions, leaders, ISR and offsets", Run: topicDescribe},
			{Name: "alter", Summary: "change a topic's configuration", Run: topicAlter},
			{Name: "delete", Summary: "delete a topic", Run: topicDelete},
			{Name: "add-partitions", Summary: "add partitions to a topic (keys move)", Run: topicAddPartitions},
			{Name: "move", Summary: "move a partition to other nodes", Run: topicMove},
		}},
		{Name: "produce", Summary: "produce one record per line of stdin", Run: produce},
		{Name: "consume", Summary: "print records of a topic", Run: consume},
		{Name: "group", Summary: "list, describe, reset and delete consumer groups", Sub: []*Command{
			{Name: "list", Summary: "list consumer groups", Run: groupList},
			{Name: "describe", Summary: "show a group's members, offsets and lag", Run: groupDescribe},
			{Name: "reset", Summary: "move a group's committed offsets", Run: groupReset},
			{Name: "delete", Summary: "delete a group and its committed offsets", Run: groupDelete},
		}},
		{Name: "txn", Summary: "list and describe transactional ids", Sub: []*Command{
			{Name: "list", Summary: "list transactional ids with their state", Run: txnList},
			{Name: "describe", Summary: "show a transactional id's transaction", Run: txnDescribe},
		}},
		{Name: "cluster", Summary: "cluster health, nodes and rebalancing", Sub: []*Command{
			{Name: "status", Summary: "show controllers, nodes and partition health", Run: clusterStatus},
			{Name: "nodes", Summary: "list storage nodes with what each holds", Run: clusterNodesCmd},
			{Name: "rebalance", Summary: "move replicas and leaders to even out the nodes", Run: clusterRebalance},
		}},
		{Name: "node", Summary: "drain and undrain storage nodes", Sub: []*Command{
			{Name: "drain", Summary: "move everything off a node before removing it", Run: nodeDrain},
			{Name: "undrain", Summary: "let a drained node take replicas again", Run: nodeUndrain},
		}},
		{Name: "user", Summary: "create, list and delete users with bearer tokens", Sub: []*Command{
			{Name: "create", Summary: "create a user and print its token", Run: userCreate},
			{Name: "list", Summary: "list users", Run: userList},
			{Name: "delete", Summary: "delete a user; its token stops working", Run: userDelete},
		}},
		{Name: "acl", Summary: "allow and deny principals operations on topics, groups and the cluster", Sub: []*Command{
			{Name: "create", Summary: "create ACLs", Run: aclCreate},
			{Name: "list", Summary: "list ACLs", Run: aclList},
			{Name: "delete", Summary: "delete ACLs", Run: aclDelete},
		}},
		{Name: "quota", Summary: "cap principals' produce and fetch byte rates and request time", Sub: []*Command{
			{Name: "set", Summary: "set a principal's quota", Run: quotaSet},
			{Name: "list", Summary: "list quotas", Run: quotaList},
		}},
		{Name: "whoami", Summary: "print the principal the cluster takes you for", Run: whoami},
	}
}

// requestTimeout bounds each admin call.
const requestTimeout = 30 * time.Second

// gateway returns a Connect client for the gateway, with the credentials.
func (e *Env) gateway() gatewayv1connect.GatewayServiceClient {
	t := e.transport()
	return gatewayv1connect.NewGatewayServiceClient(t.http, e.gatewayURL(), t.opts...)
}

// storage returns a Connect client for the storage node at addr, with the
// credentials.
func (e *Env) storage(addr string) storagev1connect.StorageServiceClient {
	t := e.transport()
	return storagev1connect.NewStorageServiceClient(t.http, strings.TrimRight(addr, "/"), t.opts...)
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestTimeout)
}
