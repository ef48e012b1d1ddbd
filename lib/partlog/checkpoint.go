package partlog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strata-mq/strata/lib/vfs"
)

// Checkpoint files (part of the format, do not change). Both are text,
// one item per line, written atomically (temp file, fsync, rename, fsync
// directory) and ended by a CRC-32C (Castagnoli) line over every byte
// before it, so a torn or corrupt checkpoint is detected and ignored.
//
// log-checkpoint:
//
//	strata-log-checkpoint v1
//	recovery-point <int64>
//	high-watermark <int64>
//	log-start-offset <int64>
//	crc32c <8 hex digits>
//
// leader-epoch-checkpoint:
//
//	strata-leader-epoch-checkpoint v1
//	entries <n>
//	<epoch int32> <start offset int64>     (n lines, epochs increasing)
//	crc32c <8 hex digits>
//
// clean-shutdown, written by Close as its last step and removed by Open
// once recovery is done, so that it exists only while no process has the
// log open after a clean close:
//
//	strata-clean-shutdown v1
//	log-end-offset <int64>
//	crc32c <8 hex digits>
//
// producer-gap, written when the log starts over at an offset with no
// idempotent-producer state (TruncateFullyAndStartAt), removed when it
// starts over with one (ResetWithProducers) or found expired by Open:
// until the time it holds, the producer state may lack producers whose
// batches lie below the log start (Log.ProducersComplete):
//
//	strata-producer-gap v1
//	until-unix-ms <int64>
//	crc32c <8 hex digits>
const (
	logCheckpointFile   = "log-checkpoint"
	epochCheckpointFile = "leader-epoch-checkpoint"
	cleanShutdownFile   = "clean-shutdown"
	producerGapFile     = "producer-gap"
	logCheckpointHeader = "strata-log-checkpoint v1"
	epochCheckpointHead = "strata-leader-epoch-checkpoint v1"
	cleanShutdownHeader = "strata-clean-shutdown v1"
	producerGapHeader   = "strata-producer-gap v1"
)

// valueCheckpoint is a checkpoint file that holds one value, a
// non-negative int64 under field:
//
//	<header>
//	<field> <int64>
//	crc32c <8 hex digits>
type valueCheckpoint struct{ file, header, field string }

// The one-value checkpoints (layouts above and in cleanswap.go).
var (
	producerGapCheckpoint   = valueCheckpoint{producerGapFile, producerGapHeader, "until-unix-ms"}
	cleanShutdownCheckpoint = valueCheckpoint{cleanShutdownFile, cleanShutdownHeader, "log-end-offset"}
	cleanerCheckpoint       = valueCheckpoint{cleanerCheckpointFile, cleanerCheckpointHeadr, "first-dirty-offset"}
)

func (c valueCheckpoint) write(fsys vfs.FS, dir string, v int64) error {
	body := fmt.Appendf(nil, "%s\n%s %d\n", c.header, c.field, v)
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, c.file), sealCheckpoint(body)); err != nil {
		return fmt.Errorf("partlog: write %s: %w", c.file, err)
	}
	return nil
}

// read returns the value, or errNoCheckpoint when the file does not exist.
func (c valueCheckpoint) read(fsys vfs.FS, dir string) (int64, error) {
	lines, err := openCheckpoint(fsys, filepath.Join(dir, c.file), c.header)
	if err != nil {
		return 0, err
	}
	if len(lines) == 1 {
		v, ok := strings.CutPrefix(lines[0], c.field+" ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("partlog: checkpoint %s: corrupt: %q", c.file, lines)
}

// errNoCheckpoint means the checkpoint file does not exist.
var errNoCheckpoint = errors.New("partlog: checkpoint: missing")

// logCheckpoint is the content of log-checkpoint.
type logCheckpoint struct {
	recoveryPoint int64 // every offset below is on disk and verified
	highWatermark int64 // last persisted high watermark
	logStart      int64 // log start offset (may be inside the first segment)
}

func sealCheckpoint(body []byte) []byte {
	return fmt.Appendf(body, "crc32c %08x\n", crc32.Checksum(body, castagnoli))
}

// openCheckpoint checks the header and CRC and returns the lines between
// them.
func openCheckpoint(fsys vfs.FS, path, header string) ([]string, error) {
	b, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoCheckpoint
	}
	if err != nil {
		return nil, fmt.Errorf("partlog: checkpoint %s: %w", filepath.Base(path), err)
	}
	bad := func(why string) error {
		return fmt.Errorf("partlog: checkpoint %s: corrupt: %s", filepath.Base(path), why)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, bad("no final newline")
	}
	i := bytes.LastIndexByte(b[:len(b)-1], '\n')
	if i < 0 {
		return nil, bad("no crc line")
	}
	body, crcLine := b[:i+1], string(b[i+1:len(b)-1])
	hex, ok := strings.CutPrefix(crcLine, "crc32c ")
	if !ok {
		return nil, bad("no crc line")
	}
	want, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return nil, bad("unreadable crc")
	}
	if got := crc32.Checksum(body, castagnoli); uint32(want) != got {
		return nil, bad(fmt.Sprintf("crc mismatch: stored %08x, computed %08x", want, got))
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if lines[0] != header {
		return nil, bad(fmt.Sprintf("unknown header %q", lines[0]))
	}
	return lines[1:], nil
}

func writeLogCheckpoint(fsys vfs.FS, dir string, c logCheckpoint) error {
	body := fmt.Appendf(nil, "%s\nrecovery-point %d\nhigh-watermark %d\nlog-start-offset %d\n",
		logCheckpointHeader, c.recoveryPoint, c.highWatermark, c.logStart)
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, logCheckpointFile), sealCheckpoint(body)); err != nil {
		return fmt.Errorf("partlog: write %s: %w", logCheckpointFile, err)
	}
	return nil
}

func readLogCheckpoint(fsys vfs.FS, dir string) (logCheckpoint, error) {
	lines, err := openCheckpoint(fsys, filepath.Join(dir, logCheckpointFile), logCheckpointHeader)
	if err != nil {
		return logCheckpoint{}, err
	}
	var c logCheckpoint
	fields := []struct {
		key string
		dst *int64
	}{{"recovery-point", &c.recoveryPoint}, {"high-watermark", &c.highWatermark}, {"log-start-offset", &c.logStart}}
	if len(lines) != len(fields) {
		return c, fmt.Errorf("partlog: checkpoint %s: corrupt: %d lines", logCheckpointFile, len(lines))
	}
	for i, f := range fields {
		v, ok := strings.CutPrefix(lines[i], f.key+" ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return c, fmt.Errorf("partlog: checkpoint %s: corrupt: line %q", logCheckpointFile, lines[i])
		}
		*f.dst = n
	}
	return c, nil
}

func writeEpochCheckpoint(fsys vfs.FS, dir string, entries []epochEntry) error {
	body := fmt.Appendf(nil, "%s\nentries %d\n", epochCheckpointHead, len(entries))
	for _, e := range entries {
		body = fmt.Appendf(body, "%d %d\n", e.epoch, e.start)
	}
	if err := vfs.WriteFileAtomic(fsys, filepath.Join(dir, epochCheckpointFile), sealCheckpoint(body)); err != nil {
		return fmt.Errorf("partlog: write %s: %w", epochCheckpointFile, err)
	}
	return nil
}

func readEpochCheckpoint(fsys vfs.FS, dir string) ([]epochEntry, error) {
	lines, err := openCheckpoint(fsys, filepath.Join(dir, epochCheckpointFile), epochCheckpointHead)
	if err != nil {
		return nil, err
	}
	corrupt := func(why string) error {
		return fmt.Errorf("partlog: checkpoint %s: corrupt: %s", epochCheckpointFile, why)
	}
	if len(lines) == 0 {
		return nil, corrupt("no entry count")
	}
	v, ok := strings.CutPrefix(lines[0], "entries ")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n != len(lines)-1 {
		return nil, corrupt(fmt.Sprintf("entry count line %q", lines[0]))
	}
	entries := make([]epochEntry, 0, n)
	for _, line := range lines[1:] {
		var e epochEntry
		if _, err := fmt.Sscanf(line, "%d %d", &e.epoch, &e.start); err != nil || e.epoch < 0 || e.start < 0 {
			return nil, corrupt(fmt.Sprintf("entry %q", line))
		}
		if k := len(entries); k > 0 && (e.epoch <= entries[k-1].epoch || e.start < entries[k-1].start) {
			return nil, corrupt(fmt.Sprintf("entry %q out of order", line))
		}
		entries = append(entries, e)
	}
	return entries, nil
}
