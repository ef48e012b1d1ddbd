package checker

import (
	"testing"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// effects records what sink group "s" wrote for topic: rows, and its
// offsets next when it stopped.
func (b *builder) effects(next []history.PartitionOffset, rows ...history.Record) {
	for i := range rows {
		rows[i].Key = ""
	}
	b.rec.Note("sink", history.EffectsOp(history.Effects{Group: "s", Topics: []string{topic}, Next: next, Rows: rows}))
}

func next(partition int32, offset int64) history.PartitionOffset {
	return history.PartitionOffset{Topic: topic, Partition: partition, Offset: offset}
}

func TestEffects(t *testing.T) {
	runCases(t, []anomalyCase{{
		name: "one effect per record",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"))
			b.effects([]history.PartitionOffset{next(0, 3)}, r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"))
		},
		check: func(t *testing.T, res Result) {
			if res.Ops[history.FEffects].Ok != 1 {
				t.Fatalf("effects notes %+v", res.Ops[history.FEffects])
			}
		},
	}, {
		name: "a record applied twice",
		build: func(b *builder) {
			b.sentAll("a", "b")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"))
			b.effects([]history.PartitionOffset{next(0, 2)}, r(0, 0, "a"), r(0, 1, "b"), r(0, 1, "b"))
		},
		want: map[string]int{KindEffectDuplicate: 1},
		check: func(t *testing.T, res Result) {
			d := res.EffectDuplicates.First[0]
			if d.Value != "b" || d.Position.Offset != 1 || d.Rows != 2 || d.Group != "s" {
				t.Fatalf("effect duplicate %+v", d)
			}
		},
	}, {
		name: "a record skipped below the sink's offset",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"))
			b.effects([]history.PartitionOffset{next(0, 3)}, r(0, 0, "a"), r(0, 2, "c"))
		},
		want: map[string]int{KindEffectMissing: 1},
		check: func(t *testing.T, res Result) {
			if m := res.EffectsMissing.First[0]; m.Value != "b" || m.Position.Offset != 1 || m.Next != 3 {
				t.Fatalf("effect missing %+v", m)
			}
		},
	}, {
		name: "records at and above the sink's offset are not judged",
		build: func(b *builder) {
			b.sentAll("a", "b", "c")
			b.poll("c1", r(0, 0, "a"), r(0, 1, "b"), r(0, 2, "c"))
			b.effects([]history.PartitionOffset{next(0, 1)}, r(0, 0, "a"))
		},
	}, {
		name: "a row for another value, and one where nothing was read",
		build: func(b *builder) {
			b.sentAll("a")
			b.poll("c1", r(0, 0, "a"))
			b.effects([]history.PartitionOffset{next(0, 1)}, r(0, 0, "a"), r(0, 0, "x"), r(1, 5, "y"))
		},
		want: map[string]int{KindEffectWrong: 2},
		check: func(t *testing.T, res Result) {
			w := res.EffectsWrong.First
			if w[0].Value != "x" || len(w[0].Log) != 1 || w[0].Log[0] != "a" || w[1].Value != "y" || len(w[1].Log) != 0 {
				t.Fatalf("effects wrong %+v", w)
			}
		},
	}})
}
