package server

import (
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each GatewayService RPC requires of its caller; the
// handlers check it (access.go and each handler's first lines), and an
// RPC missing here is refused.
var rules = guard.Rules{
	gatewayv1connect.GatewayServiceMetadataProcedure:                    {Access: guard.ACL, Check: "describe on each topic named; asked for all, the topics the caller may describe"},
	gatewayv1connect.GatewayServiceFindCoordinatorProcedure:             {Access: guard.ACL, Check: "describe on the group"},
	gatewayv1connect.GatewayServiceInitProducerIdProcedure:              {Access: guard.Authenticated, Check: "any authenticated principal"},
	gatewayv1connect.GatewayServiceCreateTopicProcedure:                 {Access: guard.ACL, Check: "create on the topic, or on the cluster"},
	gatewayv1connect.GatewayServiceDeleteTopicProcedure:                 {Access: guard.ACL, Check: "delete on the topic"},
	gatewayv1connect.GatewayServiceDescribeTopicsProcedure:              {Access: guard.ACL, Check: "describe on each topic named; asked for all, the topics the caller may describe"},
	gatewayv1connect.GatewayServiceListTopicsProcedure:                  {Access: guard.Filtered, Check: "the topics the caller may describe"},
	gatewayv1connect.GatewayServiceAlterTopicConfigProcedure:            {Access: guard.ACL, Check: "alter on the topic"},
	gatewayv1connect.GatewayServiceDescribeClusterProcedure:             {Access: guard.ACL, Check: "describe on the cluster"},
	gatewayv1connect.GatewayServiceListGroupsProcedure:                  {Access: guard.Filtered, Check: "the groups the caller may describe; their lag over the topics it may describe"},
	gatewayv1connect.GatewayServiceDescribeGroupProcedure:               {Access: guard.ACL, Check: "describe on the group; topics the caller may not describe are left out"},
	gatewayv1connect.GatewayServiceResetOffsetsProcedure:                {Access: guard.ACL, Check: "read on the group and on each topic reset"},
	gatewayv1connect.GatewayServiceDeleteGroupProcedure:                 {Access: guard.ACL, Check: "delete on the group"},
	gatewayv1connect.GatewayServiceProduceJSONProcedure:                 {Access: guard.ACL, Check: "write on the topic"},
	gatewayv1connect.GatewayServiceFetchJSONProcedure:                   {Access: guard.ACL, Check: "read on the topic"},
	gatewayv1connect.GatewayServiceAlterPartitionReassignmentsProcedure: {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceListPartitionReassignmentsProcedure:  {Access: guard.ACL, Check: "describe on the cluster"},
	gatewayv1connect.GatewayServiceRebalanceProcedure:                   {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceDrainNodeProcedure:                   {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceCreatePartitionsProcedure:            {Access: guard.ACL, Check: "alter on the topic"},
	gatewayv1connect.GatewayServiceElectLeadersProcedure:                {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceWhoAmIProcedure:                      {Access: guard.Authenticated, Check: "any authenticated principal"},
	gatewayv1connect.GatewayServiceCreateUserProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceDeleteUserProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceListUsersProcedure:                   {Access: guard.ACL, Check: "describe on the cluster"},
	gatewayv1connect.GatewayServiceCreateAclsProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceDeleteAclsProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceDescribeAclsProcedure:                {Access: guard.ACL, Check: "describe on the cluster"},
	gatewayv1connect.GatewayServiceSetQuotaProcedure:                    {Access: guard.ACL, Check: "alter on the cluster"},
	gatewayv1connect.GatewayServiceListQuotasProcedure:                  {Access: guard.ACL, Check: "describe on the cluster"},
	gatewayv1connect.GatewayServiceWatchClusterProcedure:                {Access: guard.Filtered, Check: "any authenticated principal; the overview holds the topics it may describe"},
	gatewayv1connect.GatewayServiceOffsetForTimestampProcedure:          {Access: guard.ACL, Check: "describe on the topic"},
}
