package server

import (
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each ControllerService RPC requires of its caller; the
// handlers check it (security.go and each handler's first lines), and an
// RPC missing here is refused.
var rules = guard.Rules{
	controllerv1connect.ControllerServiceRegisterNodeProcedure:                {Access: guard.ServiceOnly, Check: "the storage node the request names"},
	controllerv1connect.ControllerServiceHeartbeatProcedure:                   {Access: guard.ServiceOnly, Check: "the storage node the request names"},
	controllerv1connect.ControllerServiceRegisterCoordinatorProcedure:         {Access: guard.ServiceOnly, Check: "a coordinator"},
	controllerv1connect.ControllerServiceCoordinatorHeartbeatProcedure:        {Access: guard.ServiceOnly, Check: "a coordinator"},
	controllerv1connect.ControllerServiceUnregisterCoordinatorProcedure:       {Access: guard.ServiceOnly, Check: "a coordinator"},
	controllerv1connect.ControllerServiceCreateTopicProcedure:                 {Access: guard.ACL, Check: "create on the topic, or on the cluster"},
	controllerv1connect.ControllerServiceDeleteTopicProcedure:                 {Access: guard.ACL, Check: "delete on the topic"},
	controllerv1connect.ControllerServiceDescribeTopicsProcedure:              {Access: guard.ACL, Check: "describe on each topic named; asked for all, the topics the caller may describe"},
	controllerv1connect.ControllerServiceListTopicsProcedure:                  {Access: guard.Filtered, Check: "the topics the caller may describe"},
	controllerv1connect.ControllerServiceAlterTopicConfigProcedure:            {Access: guard.ACL, Check: "alter on the topic"},
	controllerv1connect.ControllerServiceAlterPartitionProcedure:              {Access: guard.ServiceOnly, Check: "the storage node the request names (a partition's leader)"},
	controllerv1connect.ControllerServiceWatchMetadataProcedure:               {Access: guard.ServiceOnly, Check: "any Strata service"},
	controllerv1connect.ControllerServiceAllocateProducerIdsProcedure:         {Access: guard.ServiceOnly, Check: "any Strata service (the gateways hand ids out)"},
	controllerv1connect.ControllerServiceElectLeadersProcedure:                {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceDescribeClusterProcedure:             {Access: guard.ACL, Check: "describe on the cluster"},
	controllerv1connect.ControllerServiceAlterPartitionReassignmentsProcedure: {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceListPartitionReassignmentsProcedure:  {Access: guard.ACL, Check: "describe on the cluster"},
	controllerv1connect.ControllerServiceRebalanceProcedure:                   {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceDrainNodeProcedure:                   {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceCreatePartitionsProcedure:            {Access: guard.ACL, Check: "alter on the topic"},
	controllerv1connect.ControllerServiceCreateUserProcedure:                  {Access: guard.ACL, Check: "alter on the cluster; reserved names refused"},
	controllerv1connect.ControllerServiceDeleteUserProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceListUsersProcedure:                   {Access: guard.ACL, Check: "describe on the cluster"},
	controllerv1connect.ControllerServiceCreateAclsProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceDeleteAclsProcedure:                  {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceDescribeAclsProcedure:                {Access: guard.ACL, Check: "describe on the cluster"},
	controllerv1connect.ControllerServiceSetQuotaProcedure:                    {Access: guard.ACL, Check: "alter on the cluster"},
	controllerv1connect.ControllerServiceListQuotasProcedure:                  {Access: guard.ACL, Check: "describe on the cluster"},
}
