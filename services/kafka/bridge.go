package kafka

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/metaview"
)

// Config is what a Bridge answers from.
type Config struct {
	// Gateway answers metadata, producer ids, FindCoordinator and the
	// admin calls. Required.
	Gateway Gateway
	// Storage is this storage node's own StorageService, which answers
	// Produce, Fetch and ListOffsets. Nil on the gateway and the
	// coordinator: they lead no partition, so those requests are answered
	// NOT_LEADER_OR_FOLLOWER (clients send them to leaders anyway).
	Storage storagev1connect.StorageServiceClient
	// HTTPClient and ClientOptions make the clients of the coordinator
	// instances that own groups (found through Gateway). Required.
	HTTPClient    connect.HTTPClient
	ClientOptions []connect.ClientOption
	// Logger is for errors that reach no client. Nil means slog.Default().
	Logger *slog.Logger
	// Guard authenticates the Kafka connections and checks what the
	// listener answers itself (authz.go); the services it calls check
	// the rest in the connection's principal's name. Nil: the listener
	// checks nothing.
	Guard *guard.Guard
	// LogDir is the storage node's data directory, the one log directory
	// DescribeLogDirs names. Empty on the gateway and the coordinator.
	LogDir string
	// View, when set, is the process's own metadata view (its watch of
	// the controllers; nil or version 0 before the first snapshot):
	// Metadata and DescribeCluster are answered from it, so clients
	// follow leader moves while no gateway answers, and the gateway is
	// asked only until it has one (metadata.go). Nil: the gateway is
	// asked every time (the gateway's own listener).
	View func() *metaview.View
	// AutoCreateTopics creates the unknown topics a Metadata request names
	// and allows to be created (Kafka's auto.create.topics.enable;
	// metadata.go). The listener's --kafka-auto-create-topics-enable sets
	// it.
	AutoCreateTopics bool
	// Transactions offers the transaction APIs (txn.go) in ApiVersions,
	// InitProducerId with a transactional id, and transactional Produce
	// (the storage node verifies each transaction's partitions with the
	// coordinator, KIP-890 part 1). Default false: the APIs are served
	// but not offered, a transactional id is refused UNSUPPORTED_VERSION
	// by InitProducerId and TRANSACTIONAL_ID_AUTHORIZATION_FAILED by
	// Produce. The listeners of the storage nodes, coordinators and
	// gateways set it.
	Transactions bool
}

// Gateway is the part of GatewayService the bridge calls: a
// gatewayv1connect.GatewayServiceClient, or the gateway's own handler
// in-process (every method here is unary, so both have them).
type Gateway interface {
	Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error)
	FindCoordinator(context.Context, *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error)
	InitProducerId(context.Context, *connect.Request[gatewayv1.InitProducerIdRequest]) (*connect.Response[gatewayv1.InitProducerIdResponse], error)
	CreateTopic(context.Context, *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error)
	DeleteTopic(context.Context, *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error)
	DescribeTopics(context.Context, *connect.Request[gatewayv1.DescribeTopicsRequest]) (*connect.Response[gatewayv1.DescribeTopicsResponse], error)
	AlterTopicConfig(context.Context, *connect.Request[gatewayv1.AlterTopicConfigRequest]) (*connect.Response[gatewayv1.AlterTopicConfigResponse], error)
	CreatePartitions(context.Context, *connect.Request[gatewayv1.CreatePartitionsRequest]) (*connect.Response[gatewayv1.CreatePartitionsResponse], error)
	ListGroups(context.Context, *connect.Request[gatewayv1.ListGroupsRequest]) (*connect.Response[gatewayv1.ListGroupsResponse], error)
	DescribeGroup(context.Context, *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error)
	DeleteGroup(context.Context, *connect.Request[gatewayv1.DeleteGroupRequest]) (*connect.Response[gatewayv1.DeleteGroupResponse], error)
	ListTransactions(context.Context, *connect.Request[gatewayv1.ListTransactionsRequest]) (*connect.Response[gatewayv1.ListTransactionsResponse], error)
	DescribeTransactions(context.Context, *connect.Request[gatewayv1.DescribeTransactionsRequest]) (*connect.Response[gatewayv1.DescribeTransactionsResponse], error)
	ElectLeaders(context.Context, *connect.Request[gatewayv1.ElectLeadersRequest]) (*connect.Response[gatewayv1.ElectLeadersResponse], error)
	AlterPartitionReassignments(context.Context, *connect.Request[gatewayv1.AlterPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.AlterPartitionReassignmentsResponse], error)
	ListPartitionReassignments(context.Context, *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error)
	CreateAcls(context.Context, *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error)
	DescribeAcls(context.Context, *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error)
	DeleteAcls(context.Context, *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error)
}

var _ Gateway = gatewayv1connect.GatewayServiceClient(nil)

// Bridge turns Kafka requests into calls on Strata's services. Safe for
// concurrent use.
type Bridge struct {
	cfg    Config
	log    *slog.Logger
	coords *coordinatorClients
	// consumers are the KIP-848 members (consumergroup.go).
	consumers *consumerGroups
	// sessions are the listener's fetch sessions; a listener without
	// Storage opens none.
	sessions *fetchSessions
	// located are the coordinators FindCoordinator named through this
	// bridge, for Metadata answered from the view (metadata.go).
	located LocatedCoordinators
}

// New checks cfg and returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	if cfg.Gateway == nil {
		return nil, errors.New("kafka: Config.Gateway is required")
	}
	if cfg.HTTPClient == nil {
		return nil, errors.New("kafka: Config.HTTPClient is required")
	}
	slots := defaultFetchSessionSlots
	if cfg.Storage == nil {
		slots = 0
	}
	b := &Bridge{cfg: cfg, log: cfg.Logger, coords: newCoordinatorClients(), consumers: newConsumerGroups(), sessions: newFetchSessions(slots)}
	if b.log == nil {
		b.log = slog.Default()
	}
	return b, nil
}

// handler adapts a typed handler to kafkawire's. The handler runs in the
// name of the connection's principal: the services it calls check and
// charge that principal (authz.go).
func handler[Req kmsg.Request](fn func(ctx context.Context, version int16, req Req) (kmsg.Response, error)) kafkawire.HandlerFunc {
	return func(ctx context.Context, r *kafkawire.Request) (kmsg.Response, error) {
		return fn(guard.Forward(ctx), r.Version, r.Body.(Req))
	}
}

// APIs returns the served APIs and their versions, the same on every
// listener (some clients, kafkajs, take the bootstrap's ApiVersions for
// every broker). Each API is registered in its own file beside its
// handler, api_<key>_<name>.go, so the file list is the table
// (docs/kafka.md has it with the versions); the data path is answered
// from Storage where there is one, NOT_LEADER_OR_FOLLOWER elsewhere.
func (b *Bridge) APIs() []kafkawire.API {
	apis := []kafkawire.API{
		b.produceAPI(),                     // 0
		b.fetchAPI(),                       // 1
		b.listOffsetsAPI(),                 // 2
		b.metadataAPI(),                    // 3
		b.offsetCommitAPI(),                // 8
		b.offsetFetchAPI(),                 // 9
		b.findCoordinatorAPI(),             // 10
		b.joinGroupAPI(),                   // 11
		b.heartbeatAPI(),                   // 12
		b.leaveGroupAPI(),                  // 13
		b.syncGroupAPI(),                   // 14
		b.describeGroupsAPI(),              // 15
		b.listGroupsAPI(),                  // 16
		b.createTopicsAPI(),                // 19
		b.deleteTopicsAPI(),                // 20
		b.deleteRecordsAPI(),               // 21
		b.initProducerIDAPI(),              // 22
		b.offsetForLeaderEpochAPI(),        // 23
		b.addPartitionsToTxnAPI(),          // 24
		b.addOffsetsToTxnAPI(),             // 25
		b.endTxnAPI(),                      // 26
		b.txnOffsetCommitAPI(),             // 28
		b.describeAclsAPI(),                // 29
		b.createAclsAPI(),                  // 30
		b.deleteAclsAPI(),                  // 31
		b.describeConfigsAPI(),             // 32
		b.alterConfigsAPI(),                // 33
		b.describeLogDirsAPI(),             // 35
		b.createPartitionsAPI(),            // 37
		b.deleteGroupsAPI(),                // 42
		b.electLeadersAPI(),                // 43
		b.incrementalAlterConfigsAPI(),     // 44
		b.alterPartitionReassignmentsAPI(), // 45
		b.listPartitionReassignmentsAPI(),  // 46
		b.offsetDeleteAPI(),                // 47
		b.describeClusterAPI(),             // 60
		b.describeProducersAPI(),           // 61
		b.describeTransactionsAPI(),        // 65
		b.listTransactionsAPI(),            // 66
		b.consumerGroupHeartbeatAPI(),      // 68
		b.consumerGroupDescribeAPI(),       // 69
	}
	return apis
}

// adminTimeout bounds an admin call whose request carries no timeout.
const adminTimeout = 30 * time.Second
