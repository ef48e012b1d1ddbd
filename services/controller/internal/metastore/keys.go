// Package metastore keeps the controller's cluster metadata in etcd: nodes
// and their leases, topics, partition state (replicas, leader, ISR, epochs),
// producer-id blocks, the security state (users, ACLs, quotas), and the
// metadata stream built from etcd's watch.
//
// # Key layout (part of the format; do not change without a migration)
//
// Every key lives under [Prefix]. Values are protobuf binary of the API
// messages named below, so the stored shape is the wire shape:
//
//	/strata/cluster-id                  cluster id, UUID text (put once, if absent)
//	/strata/topics/<name>               commonv1.TopicMetadata: name, topic_id, internal and
//	                                    the topic's config OVERRIDES (partitions empty)
//	/strata/partitions/<name>/<%05d>    commonv1.PartitionMetadata without offline_replicas
//	                                    (liveness is derived from /strata/live/)
//	/strata/nodes/<%010d>               controllerv1.NodeStatus: node (id, address, rack) and
//	                                    incarnation_id of the latest registration; kept after death
//	/strata/live/<%010d>                incarnation id text, attached to the node's lease;
//	                                    its CreateRevision is the node epoch, its absence means dead
//	/strata/controllers/<id>            controllerv1.ControllerMember (id, address), attached to
//	                                    the controller's election session lease
//	/strata/election/<lease hex>        concurrency.Election keys; value commonv1.ControllerHint
//	                                    of the candidate; the lowest CreateRevision is active
//	/strata/producer-ids/next           next free producer id, decimal text
//	/strata/drained/<%010d>             empty; present while the node is drained (DrainNode)
//	/strata/reassign/throttle           replication throttle of moving replicas, bytes per
//	                                    second, decimal text; absent means none
//	/strata/reassign/generation         decimal counter, bumped by every transaction that
//	                                    starts partition moves and compared by the next, so
//	                                    two plans made from one view never both start
//	/strata/reassign/balanced-nodes     sorted, comma-separated ids of the nodes the last
//	                                    automatic rebalance counted: every undrained node it
//	                                    saw alive, dead ones kept (rebalance.go)
//	/strata/security/users/<name>       commonv1.UserCredential: name, token_sha256 (the SHA-256
//	                                    of the user's token, never the token), created_ms, and
//	                                    scram_sha256, scram_sha512 (salt, iterations, StoredKey,
//	                                    ServerKey derived from the token when it was issued;
//	                                    unset for a token issued before SCRAM was offered)
//	/strata/security/acls/<principal>/<resource type>/<resource name>/<pattern type>/<permission>/<operation>
//	                                    commonv1.AclBinding, pattern_type always set; the
//	                                    principal and resource name are path-escaped
//	                                    (url.PathEscape), the rest are lib/acl's lower-case
//	                                    names (topic, literal, allow, read), so one binding has
//	                                    exactly one key and creating it again writes nothing
//	/strata/security/quotas/<principal> commonv1.Quota, principal path-escaped; absent means
//	                                    no quota
//	/strata/coordinators/<%010d>        controllerv1.CoordinatorRegistration of the live
//	                                    coordinator instance whose Kafka broker id is the key's
//	                                    number, attached to its registration lease
//	                                    (coordinators.go); absent when none holds the id
//
// Everything under /strata/security/ is the security state (users, ACLs,
// quotas; security.go): one range read and one watch cover it.
//
// Every write is one etcd transaction guarded by the ModRevision (or
// CreateRevision) of what it read, so concurrent writers from any
// controller, and a controller failing over mid-way, never leave a partial
// update: each partition record changes whole or not at all.
package metastore

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/strata-mq/strata/lib/acl"
)

// Key prefixes; see the package comment.
const (
	Prefix            = "/strata/"
	KeyClusterID      = Prefix + "cluster-id"
	PrefixTopics      = Prefix + "topics/"
	PrefixPartitions  = Prefix + "partitions/"
	PrefixNodes       = Prefix + "nodes/"
	PrefixLive        = Prefix + "live/"
	PrefixControllers = Prefix + "controllers/"
	// ElectionPrefix is the concurrency.Election prefix (without the
	// trailing slash, which the election adds).
	ElectionPrefix = Prefix + "election"
	KeyProducerIDs = Prefix + "producer-ids/next"
	electionKeys   = ElectionPrefix + "/"

	PrefixDrained    = Prefix + "drained/"
	KeyThrottle      = Prefix + "reassign/throttle"
	KeyGeneration    = Prefix + "reassign/generation"
	KeyBalancedNodes = Prefix + "reassign/balanced-nodes"

	PrefixSecurity = Prefix + "security/"
	PrefixUsers    = PrefixSecurity + "users/"
	PrefixAcls     = PrefixSecurity + "acls/"
	PrefixQuotas   = PrefixSecurity + "quotas/"
	// KeySCRAMMockSecret holds the secret unknown users' SCRAM salts are
	// derived from (EnsureSCRAMMockSecret).
	KeySCRAMMockSecret = PrefixSecurity + "scram-mock-secret"

	PrefixCoordinators = Prefix + "coordinators/"
)

func topicKey(name string) string { return PrefixTopics + name }

func partitionsPrefix(topic string) string { return PrefixPartitions + topic + "/" }

func partitionKey(topic string, p int32) string {
	return fmt.Sprintf("%s%s/%05d", PrefixPartitions, topic, p)
}

func nodeKey(id int32) string { return fmt.Sprintf("%s%010d", PrefixNodes, id) }

func liveKey(id int32) string { return fmt.Sprintf("%s%010d", PrefixLive, id) }

func drainedKey(id int32) string { return fmt.Sprintf("%s%010d", PrefixDrained, id) }

// ControllerKey is where controller id announces its address.
func ControllerKey(id string) string { return PrefixControllers + id }

func userKey(name string) string { return PrefixUsers + name }

// aclKey is a binding's one key; b must be valid (acl.Binding.Validate).
func aclKey(b acl.Binding) string {
	return PrefixAcls + url.PathEscape(b.Principal.String()) + "/" + b.ResourceType.String() + "/" +
		url.PathEscape(b.ResourceName) + "/" + b.PatternType.String() + "/" + b.Permission.String() + "/" + b.Operation.String()
}

func quotaKey(p acl.Principal) string { return PrefixQuotas + url.PathEscape(p.String()) }

func parsePartitionKey(k string) (topic string, p int32, ok bool) {
	rest, ok := strings.CutPrefix(k, PrefixPartitions)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int32(n), true
}

func parseNodeID(k, prefix string) (int32, bool) {
	rest, ok := strings.CutPrefix(k, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	return int32(n), err == nil
}
