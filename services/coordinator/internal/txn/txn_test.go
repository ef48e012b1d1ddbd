package txn

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

var (
	t0 = time.UnixMilli(1_000_000)
	t1 = t0.Add(time.Second)
)

type tp = offsetstore.TxnPartition

// row is a transactional id "tx" of producer 7 at epoch in state.
func row(state offsetstore.TxnState, epoch int16) *offsetstore.Txn {
	r := &offsetstore.Txn{ID: "tx", ProducerID: 7, ProducerEpoch: epoch, LastProducerID: -1, LastProducerEpoch: -1,
		State: state, TimeoutMs: 60000, Updated: t0}
	if state != offsetstore.TxnEmpty {
		r.Started = t0
	}
	if state == offsetstore.TxnOngoing || Prepared(state) {
		r.Partitions, r.Groups = []tp{{Topic: "a", Partition: 0}}, []string{"g"}
	}
	return r
}

// want checks an outcome's answer, whether it writes, and the written
// row's state, producer id and epoch.
func check(t *testing.T, what string, o Outcome, answer error, state offsetstore.TxnState, pid int64, epoch int16) {
	t.Helper()
	if !errors.Is(o.Answer, answer) || (answer == nil) != (o.Answer == nil) {
		t.Errorf("%s: answer %v, want %v", what, o.Answer, answer)
	}
	switch {
	case state == "" && o.Write != nil:
		t.Errorf("%s: wrote %+v, want nothing written", what, o.Write)
	case state != "" && o.Write == nil:
		t.Errorf("%s: wrote nothing, want %s", what, state)
	case state != "" && (o.Write.State != state || o.Write.ProducerID != pid || o.Write.ProducerEpoch != epoch):
		t.Errorf("%s: wrote %s pid %d epoch %d, want %s pid %d epoch %d", what, o.Write.State, o.Write.ProducerID, o.Write.ProducerEpoch, state, pid, epoch)
	}
}

func TestInit(t *testing.T) {
	const fresh = 99
	exhausted := int16(math.MaxInt16 - 1)
	rotated := row(offsetstore.TxnEmpty, 0)
	rotated.ProducerID, rotated.LastProducerID, rotated.LastProducerEpoch = fresh, 7, exhausted
	bumped := row(offsetstore.TxnEmpty, 4)
	bumped.LastProducerEpoch = 3
	for _, tc := range []struct {
		name          string
		cur           *offsetstore.Txn
		pid           int64
		epoch         int16
		newPID        int64
		answer        error
		state         offsetstore.TxnState
		wantPID       int64
		wantEpoch     int16
		staged        offsetstore.StagedOffsets
		markers       bool
		lastPID       int64
		lastEpoch     int16
		checkLastPair bool
	}{
		{name: "new id needs a producer id", pid: -1, epoch: -1, newPID: -1, answer: ErrNeedProducerID},
		{name: "new id", pid: -1, epoch: -1, newPID: fresh, state: offsetstore.TxnEmpty, wantPID: fresh, wantEpoch: 0},
		{name: "new id, the producer naming an old id (KIP-360)", pid: 3, epoch: 5, newPID: fresh, state: offsetstore.TxnEmpty, wantPID: fresh},
		{name: "Empty bumps", cur: row(offsetstore.TxnEmpty, 0), pid: -1, epoch: -1, newPID: -1, state: offsetstore.TxnEmpty, wantPID: 7, wantEpoch: 1},
		{name: "CompleteCommit bumps", cur: row(offsetstore.TxnCompleteCommit, 2), pid: -1, epoch: -1, newPID: -1, state: offsetstore.TxnEmpty, wantPID: 7, wantEpoch: 3},
		{name: "CompleteAbort bumps", cur: row(offsetstore.TxnCompleteAbort, 2), pid: -1, epoch: -1, newPID: -1, state: offsetstore.TxnEmpty, wantPID: 7, wantEpoch: 3},
		{name: "Ongoing is fenced and aborted", cur: row(offsetstore.TxnOngoing, 2), pid: -1, epoch: -1, newPID: -1, answer: ErrConcurrent,
			state: offsetstore.TxnPrepareAbort, wantPID: 7, wantEpoch: 3, staged: offsetstore.DropStaged, markers: true},
		{name: "PrepareCommit", cur: row(offsetstore.TxnPrepareCommit, 2), pid: -1, epoch: -1, newPID: -1, answer: ErrConcurrent},
		{name: "PrepareAbort", cur: row(offsetstore.TxnPrepareAbort, 2), pid: -1, epoch: -1, newPID: -1, answer: ErrConcurrent},
		{name: "exhausted epoch needs a producer id", cur: row(offsetstore.TxnEmpty, exhausted), pid: -1, epoch: -1, newPID: -1, answer: ErrNeedProducerID},
		{name: "exhausted epoch rotates the producer id", cur: row(offsetstore.TxnCompleteCommit, exhausted), pid: -1, epoch: -1, newPID: fresh,
			state: offsetstore.TxnEmpty, wantPID: fresh, wantEpoch: 0, lastPID: 7, lastEpoch: -1, checkLastPair: true},
		{name: "exhausted epoch, the producer's own", cur: row(offsetstore.TxnEmpty, exhausted), pid: 7, epoch: exhausted, newPID: fresh,
			state: offsetstore.TxnEmpty, wantPID: fresh, wantEpoch: 0, lastPID: 7, lastEpoch: exhausted, checkLastPair: true},
		{name: "retry of a rotation answered again", cur: rotated, pid: 7, epoch: exhausted, newPID: -1, wantPID: fresh, wantEpoch: 0},
		{name: "the producer's own epoch bumps (KIP-360)", cur: row(offsetstore.TxnEmpty, 3), pid: 7, epoch: 3, newPID: -1,
			state: offsetstore.TxnEmpty, wantPID: 7, wantEpoch: 4, lastPID: -1, lastEpoch: 3, checkLastPair: true},
		{name: "retry of a bump answered again", cur: bumped, pid: 7, epoch: 3, newPID: -1, wantPID: 7, wantEpoch: 4},
		{name: "another producer's epoch", cur: row(offsetstore.TxnEmpty, 3), pid: 7, epoch: 1, newPID: -1, answer: ErrProducerFenced},
		{name: "another producer id", cur: row(offsetstore.TxnEmpty, 3), pid: 8, epoch: 3, newPID: -1, answer: ErrProducerFenced},
	} {
		o := Init(tc.cur, "tx", 30000, tc.pid, tc.epoch, tc.newPID, t1)
		check(t, tc.name, o, tc.answer, tc.state, tc.wantPID, tc.wantEpoch)
		if tc.answer == nil && (o.ProducerID != tc.wantPID || o.ProducerEpoch != tc.wantEpoch) {
			t.Errorf("%s: answered pid %d epoch %d, want %d %d", tc.name, o.ProducerID, o.ProducerEpoch, tc.wantPID, tc.wantEpoch)
		}
		if o.Staged != tc.staged || o.Markers != tc.markers {
			t.Errorf("%s: staged %v markers %v, want %v %v", tc.name, o.Staged, o.Markers, tc.staged, tc.markers)
		}
		if w := o.Write; w != nil && tc.checkLastPair && (w.LastProducerID != tc.lastPID || w.LastProducerEpoch != tc.lastEpoch) {
			t.Errorf("%s: last pid %d epoch %d, want %d %d", tc.name, w.LastProducerID, w.LastProducerEpoch, tc.lastPID, tc.lastEpoch)
		}
		if w := o.Write; w != nil && w.State == offsetstore.TxnEmpty && (w.TimeoutMs != 30000 || !w.Started.IsZero() || w.Partitions != nil || !w.Updated.Equal(t1)) {
			t.Errorf("%s: Empty row %+v; want the new timeout, no start, no partitions, updated now", tc.name, w)
		}
	}
	// Fencing an exhausted epoch keeps it: the abort markers carry it.
	if o := Init(row(offsetstore.TxnOngoing, exhausted), "tx", 1000, -1, -1, -1, t1); o.Write.ProducerEpoch != exhausted {
		t.Errorf("fencing an exhausted epoch wrote epoch %d", o.Write.ProducerEpoch)
	}
}

func TestAddPartitionsAndGroups(t *testing.T) {
	a0, a1, b0 := tp{Topic: "a", Partition: 0}, tp{Topic: "a", Partition: 1}, tp{Topic: "b", Partition: 0}
	for _, tc := range []struct {
		name   string
		cur    *offsetstore.Txn
		pid    int64
		epoch  int16
		answer error
		state  offsetstore.TxnState
	}{
		{"unknown id", nil, 7, 0, ErrInvalidMapping, ""},
		{"another producer id", row(offsetstore.TxnEmpty, 0), 8, 0, ErrInvalidMapping, ""},
		{"another epoch", row(offsetstore.TxnEmpty, 1), 7, 0, ErrProducerFenced, ""},
		{"Empty begins", row(offsetstore.TxnEmpty, 0), 7, 0, nil, offsetstore.TxnOngoing},
		{"CompleteCommit begins the next", row(offsetstore.TxnCompleteCommit, 0), 7, 0, nil, offsetstore.TxnOngoing},
		{"CompleteAbort begins the next", row(offsetstore.TxnCompleteAbort, 0), 7, 0, nil, offsetstore.TxnOngoing},
		{"Ongoing adds", row(offsetstore.TxnOngoing, 0), 7, 0, nil, offsetstore.TxnOngoing},
		{"PrepareCommit", row(offsetstore.TxnPrepareCommit, 0), 7, 0, ErrConcurrent, ""},
		{"PrepareAbort", row(offsetstore.TxnPrepareAbort, 0), 7, 0, ErrConcurrent, ""},
	} {
		o := AddPartitions(tc.cur, tc.pid, tc.epoch, []tp{b0, a1, a0}, t1)
		check(t, "AddPartitions: "+tc.name, o, tc.answer, tc.state, 7, tc.epoch)
		if o.Write != nil && !reflect.DeepEqual(o.Write.Partitions, []tp{a0, a1, b0}) {
			t.Errorf("AddPartitions: %s: partitions %v, want a-0 a-1 b-0", tc.name, o.Write.Partitions)
		}
		if o.Write != nil && tc.cur.State != offsetstore.TxnOngoing && (!o.Write.Started.Equal(t1) || o.Write.Groups != nil) {
			t.Errorf("AddPartitions: %s: a new transaction started %v with groups %v; want now and none", tc.name, o.Write.Started, o.Write.Groups)
		}
		o = AddGroup(tc.cur, tc.pid, tc.epoch, "h", t1)
		check(t, "AddGroup: "+tc.name, o, tc.answer, tc.state, 7, tc.epoch)
		if o.Write != nil && tc.cur.State == offsetstore.TxnOngoing && !reflect.DeepEqual(o.Write.Groups, []string{"g", "h"}) {
			t.Errorf("AddGroup: %s: groups %v, want g h", tc.name, o.Write.Groups)
		}
	}
	if o := AddPartitions(row(offsetstore.TxnOngoing, 0), 7, 0, []tp{a0}, t1); o.Write != nil || o.Answer != nil {
		t.Errorf("adding a partition already added: %+v; want nothing written", o)
	}
	if o := AddGroup(row(offsetstore.TxnOngoing, 0), 7, 0, "g", t1); o.Write != nil || o.Answer != nil {
		t.Errorf("adding a group already added: %+v; want nothing written", o)
	}
}

func TestCheckStage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cur   *offsetstore.Txn
		pid   int64
		epoch int16
		group string
		want  error
	}{
		{"Ongoing with the group", row(offsetstore.TxnOngoing, 0), 7, 0, "g", nil},
		{"the group not added", row(offsetstore.TxnOngoing, 0), 7, 0, "h", ErrInvalidState},
		{"Empty", row(offsetstore.TxnEmpty, 0), 7, 0, "g", ErrInvalidState},
		{"PrepareCommit", row(offsetstore.TxnPrepareCommit, 0), 7, 0, "g", ErrInvalidState},
		{"unknown id", nil, 7, 0, "g", ErrInvalidMapping},
		{"fenced", row(offsetstore.TxnOngoing, 2), 7, 1, "g", ErrProducerFenced},
	} {
		if err := CheckStage(tc.cur, tc.pid, tc.epoch, tc.group); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cur    *offsetstore.Txn
		epoch  int16
		commit bool
		answer error
		state  offsetstore.TxnState
		staged offsetstore.StagedOffsets
	}{
		{"unknown id", nil, 0, true, ErrInvalidMapping, "", 0},
		{"fenced", row(offsetstore.TxnOngoing, 1), 0, true, ErrProducerFenced, "", 0},
		{"commit", row(offsetstore.TxnOngoing, 0), 0, true, nil, offsetstore.TxnPrepareCommit, offsetstore.CommitStaged},
		{"abort", row(offsetstore.TxnOngoing, 0), 0, false, nil, offsetstore.TxnPrepareAbort, offsetstore.DropStaged},
		{"commit retried while PrepareCommit", row(offsetstore.TxnPrepareCommit, 0), 0, true, nil, "", 0},
		{"abort after commit decided", row(offsetstore.TxnPrepareCommit, 0), 0, false, ErrInvalidState, "", 0},
		{"abort retried while PrepareAbort", row(offsetstore.TxnPrepareAbort, 0), 0, false, nil, "", 0},
		{"commit after abort decided", row(offsetstore.TxnPrepareAbort, 0), 0, true, ErrInvalidState, "", 0},
		{"commit retried after CompleteCommit", row(offsetstore.TxnCompleteCommit, 0), 0, true, nil, "", 0},
		{"abort after CompleteCommit", row(offsetstore.TxnCompleteCommit, 0), 0, false, ErrInvalidState, "", 0},
		{"abort retried after CompleteAbort", row(offsetstore.TxnCompleteAbort, 0), 0, false, nil, "", 0},
		{"commit after CompleteAbort", row(offsetstore.TxnCompleteAbort, 0), 0, true, ErrInvalidState, "", 0},
		{"commit of no transaction", row(offsetstore.TxnEmpty, 0), 0, true, ErrInvalidState, "", 0},
		{"abort of no transaction", row(offsetstore.TxnEmpty, 0), 0, false, ErrInvalidState, "", 0},
	} {
		o := End(tc.cur, 7, tc.epoch, tc.commit, t1)
		check(t, tc.name, o, tc.answer, tc.state, 7, tc.epoch)
		if o.Staged != tc.staged || o.Markers != (tc.state != "") {
			t.Errorf("%s: staged %v markers %v, want %v %v", tc.name, o.Staged, o.Markers, tc.staged, tc.state != "")
		}
		if o.Write != nil && !reflect.DeepEqual(o.Write.Partitions, tc.cur.Partitions) {
			t.Errorf("%s: the decision dropped partitions: %v", tc.name, o.Write.Partitions)
		}
	}
}

func TestTimeout(t *testing.T) {
	cur := row(offsetstore.TxnOngoing, 2) // started t0, 60 s timeout
	if TimedOut(cur, t0.Add(59*time.Second)) || !TimedOut(cur, t0.Add(60*time.Second)) {
		t.Fatal("TimedOut does not turn at the timeout")
	}
	if o := Timeout(cur, 7, 2, t0.Add(59*time.Second)); o.Write != nil {
		t.Fatal("aborted before its timeout")
	}
	o := Timeout(cur, 7, 2, t0.Add(time.Minute))
	check(t, "timed out", o, nil, offsetstore.TxnPrepareAbort, 7, 3)
	if o.Staged != offsetstore.DropStaged || !o.Markers {
		t.Errorf("timed out: staged %v markers %v; want dropped, markers", o.Staged, o.Markers)
	}
	for name, c := range map[string]*offsetstore.Txn{"bumped since": row(offsetstore.TxnOngoing, 3), "ended since": row(offsetstore.TxnPrepareCommit, 2), "gone": nil} {
		if o := Timeout(c, 7, 2, t0.Add(time.Hour)); o.Write != nil {
			t.Errorf("%s: the timeout wrote %+v", name, o.Write)
		}
	}
	// The fenced producer's next call is refused.
	if o := End(o.Write, 7, 2, true, t1); !errors.Is(o.Answer, ErrProducerFenced) {
		t.Errorf("EndTxn of the timed-out producer: %v, want PRODUCER_FENCED", o.Answer)
	}
}

func TestMarkersWritten(t *testing.T) {
	a0, a1 := tp{Topic: "a", Partition: 0}, tp{Topic: "a", Partition: 1}
	cur := row(offsetstore.TxnPrepareCommit, 0)
	cur.Partitions = []tp{a0, a1}
	o := MarkersWritten(cur, 7, 0, offsetstore.TxnPrepareCommit, []tp{a1}, t1)
	check(t, "one of two", o, nil, offsetstore.TxnPrepareCommit, 7, 0)
	if !reflect.DeepEqual(o.Write.Partitions, []tp{a0}) {
		t.Fatalf("partitions left %v, want a-0", o.Write.Partitions)
	}
	o = MarkersWritten(o.Write, 7, 0, offsetstore.TxnPrepareCommit, []tp{a0}, t1)
	check(t, "the last", o, nil, offsetstore.TxnCompleteCommit, 7, 0)
	if o.Write.Partitions != nil || o.Write.Groups != nil {
		t.Errorf("CompleteCommit kept %v %v", o.Write.Partitions, o.Write.Groups)
	}
	abort := row(offsetstore.TxnPrepareAbort, 1)
	check(t, "abort", MarkersWritten(abort, 7, 1, offsetstore.TxnPrepareAbort, abort.Partitions, t1), nil, offsetstore.TxnCompleteAbort, 7, 1)
	empty := row(offsetstore.TxnPrepareAbort, 1)
	empty.Partitions = nil
	check(t, "no partitions", MarkersWritten(empty, 7, 1, offsetstore.TxnPrepareAbort, nil, t1), nil, offsetstore.TxnCompleteAbort, 7, 1)
	for name, args := range map[string]struct {
		cur   *offsetstore.Txn
		epoch int16
		state offsetstore.TxnState
	}{
		"another epoch":     {row(offsetstore.TxnPrepareCommit, 1), 0, offsetstore.TxnPrepareCommit},
		"another decision":  {row(offsetstore.TxnPrepareAbort, 0), 0, offsetstore.TxnPrepareCommit},
		"completed already": {row(offsetstore.TxnCompleteCommit, 0), 0, offsetstore.TxnCompleteCommit},
		"none":              {nil, 0, offsetstore.TxnPrepareCommit},
	} {
		if o := MarkersWritten(args.cur, 7, args.epoch, args.state, []tp{a0}, t1); o.Write != nil {
			t.Errorf("%s: wrote %+v", name, o.Write)
		}
	}
}

func TestExpire(t *testing.T) {
	const after = 7 * 24 * time.Hour
	for _, st := range []offsetstore.TxnState{offsetstore.TxnEmpty, offsetstore.TxnCompleteCommit, offsetstore.TxnCompleteAbort} {
		cur := row(st, 2) // updated t0
		if o := Expire(cur, 7, 2, after, t0.Add(after-time.Millisecond)); o.Delete {
			t.Errorf("%s deleted before its expiration", st)
		}
		if o := Expire(cur, 7, 2, after, t0.Add(after)); !o.Delete || o.Write != nil {
			t.Errorf("%s at its expiration: %+v; want deleted", st, o)
		}
		if o := Expire(cur, 7, 1, after, t0.Add(after)); o.Delete {
			t.Errorf("%s bumped since it was seen: deleted", st)
		}
	}
	for _, st := range []offsetstore.TxnState{offsetstore.TxnOngoing, offsetstore.TxnPrepareCommit, offsetstore.TxnPrepareAbort} {
		if o := Expire(row(st, 2), 7, 2, after, t0.Add(10*after)); o.Delete {
			t.Errorf("%s deleted: only ids without a transaction expire", st)
		}
	}
}
