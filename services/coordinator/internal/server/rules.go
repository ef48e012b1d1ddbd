package server

import (
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each CoordinatorService RPC requires of its caller; the
// handlers check it (security.go), and an RPC missing here is refused.
var rules = guard.Rules{
	coordinatorv1connect.CoordinatorServiceConsumerGroupHeartbeatProcedure: {Access: guard.ACL, Check: "read on the group; topics the member may not describe are left out of its assignment"},
	coordinatorv1connect.CoordinatorServiceLeaveGroupProcedure:             {Access: guard.ACL, Check: "read on the group"},
	coordinatorv1connect.CoordinatorServiceOffsetCommitProcedure:           {Access: guard.ACL, Check: "read on the group and on each topic committed"},
	coordinatorv1connect.CoordinatorServiceOffsetFetchProcedure:            {Access: guard.ACL, Check: "describe on the group and on each topic named; asked for all, topics the caller may not describe are left out"},
	coordinatorv1connect.CoordinatorServiceListGroupsProcedure:             {Access: guard.Filtered, Check: "the groups the caller may describe"},
	coordinatorv1connect.CoordinatorServiceDescribeGroupProcedure:          {Access: guard.ACL, Check: "describe on the group; topics the caller may not describe are left out"},
	coordinatorv1connect.CoordinatorServiceResetOffsetsProcedure:           {Access: guard.ACL, Check: "read on the group and on each topic reset"},
	coordinatorv1connect.CoordinatorServiceDeleteGroupProcedure:            {Access: guard.ACL, Check: "delete on the group"},
	coordinatorv1connect.CoordinatorServiceOffsetDeleteProcedure:           {Access: guard.ACL, Check: "delete on the group, and read on each topic named"},
	coordinatorv1connect.CoordinatorServiceLocateGroupProcedure:            {Access: guard.ACL, Check: "describe on the group, or on the transactional id (key type TRANSACTION)"},
	coordinatorv1connect.CoordinatorServiceClassicJoinGroupProcedure:       {Access: guard.ACL, Check: "read on the group"},
	coordinatorv1connect.CoordinatorServiceClassicSyncGroupProcedure:       {Access: guard.ACL, Check: "read on the group"},
	coordinatorv1connect.CoordinatorServiceClassicHeartbeatProcedure:       {Access: guard.ACL, Check: "read on the group"},
	coordinatorv1connect.CoordinatorServiceClassicLeaveGroupProcedure:      {Access: guard.ACL, Check: "read on the group"},
	// Transactions (txn.go), as Kafka authorizes them: write on the
	// transactional id for the producer's calls, and on what each touches
	// (docs/design/transactions.md, "Authorization").
	coordinatorv1connect.CoordinatorServiceInitTransactionalProducerProcedure: {Access: guard.ACL, Check: "write on the transactional id"},
	coordinatorv1connect.CoordinatorServiceAddPartitionsToTxnProcedure:        {Access: guard.ACL, Check: "write on the transactional id and on each partition's topic; the producer id and epoch of the transactional id"},
	coordinatorv1connect.CoordinatorServiceAddOffsetsToTxnProcedure:           {Access: guard.ACL, Check: "write on the transactional id, read on the group; the producer id and epoch of the transactional id"},
	coordinatorv1connect.CoordinatorServiceTxnOffsetCommitProcedure:           {Access: guard.ACL, Check: "write on the transactional id, read on the group and on each topic committed; the producer id and epoch of the transactional id"},
	coordinatorv1connect.CoordinatorServiceEndTxnProcedure:                    {Access: guard.ACL, Check: "write on the transactional id; its producer id and epoch"},
	coordinatorv1connect.CoordinatorServiceDescribeTransactionsProcedure:      {Access: guard.ACL, Check: "describe on each transactional id, filtered: a refused id is its own error; partitions of topics the caller may not describe are left out"},
	coordinatorv1connect.CoordinatorServiceListTransactionsProcedure:          {Access: guard.ACL, Check: "describe on each transactional id, filtered: ids the caller may not describe are left out"},
	coordinatorv1connect.CoordinatorServiceVerifyTxnPartitionsProcedure:       {Access: guard.ServiceOnly, Check: "the storage role (a partition's leader, KIP-890 verification)"},
}
