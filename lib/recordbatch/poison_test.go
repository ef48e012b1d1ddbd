package recordbatch_test

import (
	"errors"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// Every poison batch passes its CRC, and ValidateProduced refuses every one
// of them; those marked undecodable are refused by Decode and Validate too,
// with the same sentinel.
func TestPoisonBatchesAreRefused(t *testing.T) {
	for _, p := range batchtest.Poisons(t) {
		t.Run(p.Name, func(t *testing.T) {
			if _, err := recordbatch.Verify(p.Batch); err != nil {
				t.Fatalf("CRC: %v (a poison batch must pass it)", err)
			}
			_, err := recordbatch.ValidateProduced(p.Batch)
			if !errors.Is(err, recordbatch.ErrCorrupt) && !errors.Is(err, recordbatch.ErrInvalidRecord) {
				t.Fatalf("ValidateProduced: %v", err)
			}
			t.Log(err)
			_, derr := recordbatch.Decode(p.Batch)
			_, verr := recordbatch.Validate(p.Batch)
			if p.Undecodable != (derr != nil) || (derr == nil) != (verr == nil) {
				t.Fatalf("Decode: %v, Validate: %v; undecodable %v", derr, verr, p.Undecodable)
			}
		})
	}
}
