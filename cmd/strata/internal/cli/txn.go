package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// The transaction commands: what the transaction coordinators hold, for
// operators (Kafka's kafka-transactions.sh list and describe).

// txnStateName is a state as the commands print it: "ongoing",
// "prepare-commit", "complete-abort".
func txnStateName(s coordinatorv1.TransactionState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "TRANSACTION_STATE_")), "_", "-")
}

// txnStates are the states --state accepts, by their printed names.
var txnStates = func() map[string]coordinatorv1.TransactionState {
	out := map[string]coordinatorv1.TransactionState{}
	for v := range coordinatorv1.TransactionState_name {
		if s := coordinatorv1.TransactionState(v); s != coordinatorv1.TransactionState_TRANSACTION_STATE_UNSPECIFIED {
			out[txnStateName(s)] = s
		}
	}
	return out
}()

func txnList(ctx context.Context, e *Env, args []string) error {
	var states string
	f := newFlags(e, "strata txn list",
		"List the transactional ids the transaction coordinators hold, with their producer id and state.",
		"strata txn list --state ongoing,prepare-commit")
	f.String(&states, "", "state", "STATES", "", "only ids in these states, comma-separated: empty, ongoing, prepare-commit, prepare-abort, complete-commit, complete-abort")
	if _, err := f.parse(args); err != nil {
		return err
	}
	req := &gatewayv1.ListTransactionsRequest{}
	for _, name := range strings.Split(states, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		s, ok := txnStates[name]
		if !ok {
			return usagef("--state %q is not a transaction state: empty, ongoing, prepare-commit, prepare-abort, complete-commit or complete-abort", name)
		}
		req.States = append(req.States, s)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().ListTransactions(ctx, connect.NewRequest(req))
	if err != nil {
		return &coordinatorError{err}
	}
	if e.Output == "json" {
		return writeProtoJSON(e, resp.Msg)
	}
	var rows [][]string
	for _, t := range resp.Msg.GetTransactions() {
		rows = append(rows, []string{t.GetTransactionalId(), fmt.Sprint(t.GetProducerId()), txnStateName(t.GetState())})
	}
	table(e.Stdout, []string{"TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"}, rows)
	return nil
}

func txnDescribe(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata txn describe TRANSACTIONAL_ID",
		"Show a transactional id's state, producer id and epoch, timeout, the start of its transaction,\nand the partitions and groups it writes (in prepare-commit or prepare-abort, the partitions\nwhose marker is still to be written). An unknown id exits 1.",
		"strata txn describe orders-etl-0")
	pos, err := f.parse(args, "TRANSACTIONAL_ID")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().DescribeTransactions(ctx, connect.NewRequest(&gatewayv1.DescribeTransactionsRequest{TransactionalIds: pos[:1]}))
	if err != nil {
		return &coordinatorError{err}
	}
	ts := resp.Msg.GetTransactions()
	if len(ts) != 1 {
		return fmt.Errorf("the coordinator answered %d descriptions for one transactional id", len(ts))
	}
	t := ts[0]
	if d := t.GetError(); d != nil {
		return fmt.Errorf("transactional id %q: %s", pos[0], oneLine(d.GetMessage()))
	}
	if e.Output == "json" {
		return writeProtoJSON(e, t)
	}
	fmt.Fprintf(e.Stdout, "transactional id %s  state %s  producer id %d  epoch %d\n",
		t.GetTransactionalId(), txnStateName(t.GetState()), t.GetProducerId(), t.GetProducerEpoch())
	started := "-"
	if ms := t.GetTransactionStartTimeMs(); ms >= 0 {
		started = fmt.Sprintf("%s (%s ago)", time.UnixMilli(ms).UTC().Format(time.RFC3339), time.Since(time.UnixMilli(ms)).Truncate(time.Second))
	}
	fmt.Fprintf(e.Stdout, "timeout %s  started %s  coordinator %s\n",
		time.Duration(t.GetTransactionTimeoutMs())*time.Millisecond, started, or(t.GetCoordinatorId(), "-"))
	var rows [][]string
	for _, tp := range t.GetPartitions() {
		for _, p := range tp.GetPartitions() {
			rows = append(rows, []string{"partition", fmt.Sprintf("%s-%d", tp.GetTopic(), p)})
		}
	}
	for _, g := range t.GetGroupIds() {
		rows = append(rows, []string{"group", g})
	}
	table(e.Stdout, []string{"WRITES", "NAME"}, rows)
	return nil
}
