package cli

import (
	"strings"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// consume of a partition holding a batch that cannot be decoded prints the
// records before it and fails with one line naming the partition and the
// offsets and saying how to read on; -p/-o past it and --skip-corrupt
// (with a warning) both read the rest.
func TestConsumeCorruptBatch(t *testing.T) {
	fc := fake(t)
	gw := fc.GatewayURL()
	if r := run(t, gw, "", "topic", "create", "old", "-p", "1"); r.code != 0 {
		t.Fatal(r)
	}
	if r := run(t, gw, "a\nb\nc\n", "produce", "old"); r.code != 0 {
		t.Fatal(r)
	}
	if at := fc.AppendRaw("old", 0, batchtest.Poisons(t)[0].Batch); at != 3 {
		t.Fatalf("poison at %d, want 3", at)
	}
	if r := run(t, gw, "d\ne\n", "produce", "old"); r.code != 0 {
		t.Fatal(r)
	}

	r := run(t, gw, "", "consume", "old", "-e", "-f", `%o:%v\n`)
	if r.stdout != "0:a\n1:b\n2:c\n" {
		t.Errorf("stdout %q, want the records before the bad batch", r.stdout)
	}
	wantOneLine(t, r, "strata: topic old partition 0 offset 3: batch cannot be decoded (offsets 3 to 6): "+
		"recordbatch: corrupt records: recordCount 4 cannot fit in 27 bytes; "+
		"to read on past it, run again with -p 0 -o 7, or with --skip-corrupt to skip every such batch (their records are lost)")

	r = run(t, gw, "", "consume", "old", "-e", "-f", `%o:%v\n`, "-p", "0", "-o", "7")
	if r.code != 0 || r.stdout != "7:d\n8:e\n" {
		t.Fatalf("-p 0 -o 7: %+v", r)
	}
	r = run(t, gw, "", "consume", "old", "-e", "-f", `%o:%v\n`, "--skip-corrupt")
	if r.code != 0 || r.stdout != "0:a\n1:b\n2:c\n7:d\n8:e\n" {
		t.Fatalf("--skip-corrupt: %+v", r)
	}
	if want := "strata: skipped offsets 3 to 6 of topic old partition 0: batch cannot be decoded: "; !strings.HasPrefix(r.stderr, want) ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("--skip-corrupt stderr %q, want one line starting %q", r.stderr, want)
	}
}
