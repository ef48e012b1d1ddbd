package server

import (
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each StorageService RPC requires of its caller; the
// handlers check it (security.go), and an RPC missing here is refused.
var rules = guard.Rules{
	storagev1connect.StorageServiceProduceProcedure:              {Access: guard.ACL, Check: "write on the topic; with a transactional id, write on it too"},
	storagev1connect.StorageServiceProducePartitionsProcedure:    {Access: guard.ACL, Check: "write on each partition's topic, partition by partition; with a transactional id, write on it for the whole request"},
	storagev1connect.StorageServiceFetchProcedure:                {Access: guard.ACL, Check: "read on each partition's topic, partition by partition"},
	storagev1connect.StorageServiceListOffsetsProcedure:          {Access: guard.ACL, Check: "describe on each partition's topic"},
	storagev1connect.StorageServiceReplicateProcedure:            {Access: guard.ServiceOnly, Check: "the storage node the request names as its replica"},
	storagev1connect.StorageServiceOffsetForLeaderEpochProcedure: {Access: guard.ACL, Check: "describe on the topic; from a follower, the storage node it names"},
	storagev1connect.StorageServiceDescribeLogProcedure:          {Access: guard.ACL, Check: "describe on the cluster"},
	storagev1connect.StorageServiceDeleteRecordsProcedure:        {Access: guard.ACL, Check: "delete on each partition's topic, partition by partition"},
	storagev1connect.StorageServiceDescribeProducersProcedure:    {Access: guard.ACL, Check: "read on each partition's topic, partition by partition"},
	storagev1connect.StorageServiceWriteTxnMarkersProcedure:      {Access: guard.ServiceOnly, Check: "the coordinator service (the transaction coordinator ends transactions)"},
}
