package server

import (
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each GatewayService RPC requires of its caller, and the
// gateway's forward table: the gateway checks the ACL, Filtered and
// Authenticated rules itself (access.go), for what it answers from its
// own cache; a Forwarded RPC runs in the caller's name (guard.Forward),
// and the service that owns the data checks it as it would a direct
// call. An RPC missing here is refused.
var rules = guard.Rules{
	gatewayv1connect.GatewayServiceMetadataProcedure:                    {Access: guard.ACL, Check: "describe on each topic named; asked for all, the topics the caller may describe"},
	gatewayv1connect.GatewayServiceFindCoordinatorProcedure:             {Access: guard.ACL, Check: "describe on the group, or on the transactional id"},
	gatewayv1connect.GatewayServiceInitProducerIdProcedure:              {Access: guard.Authenticated, Check: "any authenticated principal"},
	gatewayv1connect.GatewayServiceCreateTopicProcedure:                 {Access: guard.Forwarded, Check: "the controller checks create on the topic, or on the cluster"},
	gatewayv1connect.GatewayServiceDeleteTopicProcedure:                 {Access: guard.Forwarded, Check: "the controller checks delete on the topic"},
	gatewayv1connect.GatewayServiceDescribeTopicsProcedure:              {Access: guard.Forwarded, Check: "the controller checks describe on each topic named; asked for all, the topics the caller may describe; each leader: describe on the topic for offsets"},
	gatewayv1connect.GatewayServiceListTopicsProcedure:                  {Access: guard.Forwarded, Check: "the controller answers only the topics the caller may describe"},
	gatewayv1connect.GatewayServiceAlterTopicConfigProcedure:            {Access: guard.Forwarded, Check: "the controller checks alter on the topic"},
	gatewayv1connect.GatewayServiceDescribeClusterProcedure:             {Access: guard.Forwarded, Check: "the controller checks describe on the cluster"},
	gatewayv1connect.GatewayServiceListGroupsProcedure:                  {Access: guard.Forwarded, Check: "the coordinator answers only the groups the caller may describe, with their lag over the topics it may describe"},
	gatewayv1connect.GatewayServiceDescribeGroupProcedure:               {Access: guard.Forwarded, Check: "the coordinator checks describe on the group; topics the caller may not describe are left out"},
	gatewayv1connect.GatewayServiceResetOffsetsProcedure:                {Access: guard.Forwarded, Check: "the coordinator checks read on the group and on each topic reset"},
	gatewayv1connect.GatewayServiceListTransactionsProcedure:            {Access: guard.Forwarded, Check: "the coordinator checks describe on each transactional id"},
	gatewayv1connect.GatewayServiceDescribeTransactionsProcedure:        {Access: guard.Forwarded, Check: "the coordinator checks describe on each transactional id"},
	gatewayv1connect.GatewayServiceDeleteGroupProcedure:                 {Access: guard.Forwarded, Check: "the coordinator checks delete on the group"},
	gatewayv1connect.GatewayServiceProduceJSONProcedure:                 {Access: guard.Forwarded, Check: "the partition's leader checks write on the topic, and the caller's produce quota"},
	gatewayv1connect.GatewayServiceFetchJSONProcedure:                   {Access: guard.Forwarded, Check: "the partition's leader checks read on the topic, and the caller's fetch quota"},
	gatewayv1connect.GatewayServiceAlterPartitionReassignmentsProcedure: {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceListPartitionReassignmentsProcedure:  {Access: guard.Forwarded, Check: "the controller checks describe on the cluster"},
	gatewayv1connect.GatewayServiceRebalanceProcedure:                   {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceDrainNodeProcedure:                   {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceCreatePartitionsProcedure:            {Access: guard.Forwarded, Check: "the controller checks alter on the topic"},
	gatewayv1connect.GatewayServiceElectLeadersProcedure:                {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceWhoAmIProcedure:                      {Access: guard.Authenticated, Check: "any authenticated principal"},
	gatewayv1connect.GatewayServiceCreateUserProcedure:                  {Access: guard.Forwarded, Check: "the controller checks alter on the cluster; reserved names refused"},
	gatewayv1connect.GatewayServiceDeleteUserProcedure:                  {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceListUsersProcedure:                   {Access: guard.Forwarded, Check: "the controller checks describe on the cluster"},
	gatewayv1connect.GatewayServiceCreateAclsProcedure:                  {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceDeleteAclsProcedure:                  {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceDescribeAclsProcedure:                {Access: guard.Forwarded, Check: "the controller checks describe on the cluster"},
	gatewayv1connect.GatewayServiceSetQuotaProcedure:                    {Access: guard.Forwarded, Check: "the controller checks alter on the cluster"},
	gatewayv1connect.GatewayServiceListQuotasProcedure:                  {Access: guard.Forwarded, Check: "the controller checks describe on the cluster"},
	gatewayv1connect.GatewayServiceWatchClusterProcedure:                {Access: guard.Filtered, Check: "any authenticated principal; the overview holds the topics it may describe"},
	gatewayv1connect.GatewayServiceOffsetForTimestampProcedure:          {Access: guard.Forwarded, Check: "the partition's leader checks describe on the topic"},
}
