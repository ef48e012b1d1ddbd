package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// The leader's half of KIP-890 part 1 (docs/design/transactions.md): a
// transactional batch that would open a transaction on a partition is
// appended only once the transactional id's coordinator answered that
// the partition is in the producer's Ongoing transaction
// (CoordinatorService.VerifyTxnPartitions). The replica decides when to
// ask and keeps the answer (replica/txnverify.go); this finds the
// coordinator that owns the id, as the gateway's FindCoordinator does,
// from the coordinators registered in the metadata view.

// txnVerifyTimeout bounds one verification, the owner's lookup included,
// so a coordinator that does not answer costs a produce this much at
// most before it is refused retriably.
const txnVerifyTimeout = 5 * time.Second

// maxTxnVerifyHops bounds how often one verification follows a
// REASON_NOT_COORDINATOR hint while the id's ownership moves.
const maxTxnVerifyHops = 3

// txnVerifier is the replica's verifier for a produce of transactional
// id txnID to topic-partition, nil without a transactional id (the
// replica then refuses transactional batches).
func (n *Node) txnVerifier(txnID, topic string, partition int32) replica.TxnVerifier {
	if txnID == "" {
		return nil
	}
	return func(ctx context.Context, pid int64, epoch int16) error {
		return n.verifyTxnPartition(ctx, txnID, topic, partition, pid, epoch)
	}
}

// verifyTxnPartition asks the owner of txnID whether topic-partition is
// in producer pid's Ongoing transaction at epoch. It answers as
// replica.TxnVerifier says: the coordinator's refusal as
// ErrInvalidTxnState, ErrInvalidProducerIDMapping or
// ErrInvalidProducerEpoch (Kafka's ReplicaManager turns the
// coordinator's PRODUCER_FENCED into INVALID_PRODUCER_EPOCH on a produce),
// and anything else, a coordinator unreachable or moving, as the
// retriable ErrTxnNotVerified.
func (n *Node) verifyTxnPartition(ctx context.Context, txnID, topic string, partition int32, pid int64, epoch int16) error {
	ctx, cancel := context.WithTimeout(ctx, txnVerifyTimeout)
	defer cancel()
	notVerified := func(format string, args ...any) error {
		return fmt.Errorf("%w: transactional id %q: "+format, append([]any{replica.ErrTxnNotVerified, txnID}, args...)...)
	}
	addr, err := n.locateTxnOwner(ctx, txnID)
	if err != nil {
		return notVerified("%v", err)
	}
	req := &coordinatorv1.VerifyTxnPartitionsRequest{TransactionalId: txnID, ProducerId: pid, ProducerEpoch: int32(epoch),
		Partitions: []*commonv1.TopicPartitions{{Topic: topic, Partitions: []int32{partition}}}}
	var res *connect.Response[coordinatorv1.VerifyTxnPartitionsResponse]
	for hop := 0; ; hop++ {
		res, err = n.coordinatorClient(addr).VerifyTxnPartitions(ctx, connect.NewRequest(req))
		if err == nil {
			break
		}
		ed := apierr.DetailOf(err)
		next := ed.GetCoordinator().GetAddress()
		if ed.GetReason() != commonv1.Reason_REASON_NOT_COORDINATOR || next == "" || next == addr || hop+1 >= maxTxnVerifyHops {
			return notVerified("coordinator %s: %v", addr, err)
		}
		addr = next
	}
	for _, p := range res.Msg.GetPartitions() {
		if p.GetTopic() != topic || p.GetPartition() != partition {
			continue
		}
		d := p.GetError()
		switch d.GetReason() {
		case commonv1.Reason_REASON_UNSPECIFIED:
			if d == nil {
				return nil
			}
		case commonv1.Reason_REASON_INVALID_TXN_STATE:
			return fmt.Errorf("%w: %s", replica.ErrInvalidTxnState, d.GetMessage())
		case commonv1.Reason_REASON_INVALID_PRODUCER_ID_MAPPING:
			return fmt.Errorf("%w: %s", replica.ErrInvalidProducerIDMapping, d.GetMessage())
		case commonv1.Reason_REASON_PRODUCER_FENCED:
			return fmt.Errorf("%w: %s", replica.ErrInvalidProducerEpoch, d.GetMessage())
		}
		return notVerified("coordinator %s: %s (%s)", addr, d.GetMessage(), d.GetReason())
	}
	return notVerified("coordinator %s did not answer partition %s-%d", addr, topic, partition)
}

// locateTxnOwner asks the registered coordinators in turn which one owns
// txnID (LocateGroup with key type TRANSACTION), moving on while they are
// unavailable, and returns the owner's address.
func (n *Node) locateTxnOwner(ctx context.Context, txnID string) (string, error) {
	regs := n.currentView().Coordinators.GetCoordinators()
	if len(regs) == 0 {
		return "", errors.New("no coordinator is registered with the controller")
	}
	var lastErr error
	for _, reg := range regs {
		res, err := n.coordinatorClient(reg.GetAddress()).LocateGroup(ctx, connect.NewRequest(&coordinatorv1.LocateGroupRequest{
			GroupId: txnID, KeyType: coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION}))
		if err == nil && res.Msg.GetAddress() != "" {
			return res.Msg.GetAddress(), nil
		}
		if err == nil {
			err = fmt.Errorf("coordinator %s named no owner", reg.GetAddress())
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("cannot locate the owner: %w", lastErr)
}

// coordinatorClient is a client of the coordinator at addr. Clients are
// cheap (no connection of their own), so one is made per call.
func (n *Node) coordinatorClient(addr string) coordinatorv1connect.CoordinatorServiceClient {
	return coordinatorv1connect.NewCoordinatorServiceClient(n.cfg.HTTPClient, addr, n.cfg.ClientOptions...)
}
