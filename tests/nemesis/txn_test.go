package nemesis

import (
	"bytes"
	"errors"
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// TestCountTxns: the report's tally of transactions by how they ended.
func TestCountTxns(t *testing.T) {
	rec := history.NewRecorder(&bytes.Buffer{})
	end := func(id string, commit bool, how func(*history.Handle)) {
		h := rec.Invoke("p", history.TxnOp(history.Txn{ID: id, Commit: commit}))
		if how != nil {
			how(h)
		}
	}
	ok := func(h *history.Handle) { h.Ok(h.Op()) }
	end("p/1", true, ok)                                                               // committed
	end("p/2", true, ok)                                                               // committed
	end("p/3", false, ok)                                                              // aborted as asked
	end("p/4", true, func(h *history.Handle) { h.Fail(errors.New("abort required")) }) // known aborted
	end("p/5", true, func(h *history.Handle) { h.Info(errors.New("answer lost")) })    // unknown
	end("p/6", true, nil)                                                              // never answered
	got := countTxns(rec.Events())
	if want := (txnCounts{committed: 2, aborted: 2, unknown: 2}); got != want {
		t.Fatalf("countTxns = %+v, want %+v", got, want)
	}
}
