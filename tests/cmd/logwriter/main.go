// Command logwriter appends deterministic batches to a partition log and
// prints one line per acknowledged append, so a test can kill it with
// SIGKILL at any moment and check what survived against what was
// acknowledged. It continues the sequence from the log end on restart.
//
// Output, one line per ack: "ack SEQ LASTOFFSET".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/tests/logcheck"
)

func main() {
	dir := flag.String("dir", "", "partition log directory")
	flush := flag.String("flush", "sync", "flush policy: none or sync")
	segment := flag.Int64("segment-bytes", 256<<10, "segment size, small so crashes land across rolls")
	flag.Parse()
	if err := run(*dir, *flush, *segment); err != nil {
		fmt.Fprintln(os.Stderr, "logwriter:", err)
		os.Exit(1)
	}
}

func run(dir, flush string, segmentBytes int64) error {
	cfg := partlog.Config{SegmentBytes: segmentBytes}
	switch flush {
	case "none":
		cfg.Flush.Mode = partlog.FlushNone
	case "sync":
		cfg.Flush.Mode = partlog.FlushSync
	default:
		return fmt.Errorf("--flush %q: want none or sync", flush)
	}
	l, err := partlog.Open(dir, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	ctx := context.Background()
	seq := l.LogEndOffset() / logcheck.RecordsPerBatch
	for ; ; seq++ {
		b, err := logcheck.Batch(seq)
		if err != nil {
			return err
		}
		info, err := l.AppendAsLeader(ctx, b, logcheck.Epoch)
		if err != nil {
			return err
		}
		fmt.Printf("ack %d %d\n", seq, info.LastOffset)
	}
}
