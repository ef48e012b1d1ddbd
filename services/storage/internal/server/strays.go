package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// removeStrays deletes the replica directories in the data directory that
// the metadata no longer assigns to this node: copies left by a node that
// was down while a partition moved off it (or its topic was deleted),
// which the close-and-delete of a hosted replica never saw. Kafka's
// brokers delete such "stray" logs at startup the same way. It runs once,
// with the first metadata view (a full snapshot from the controller, so
// authoritative): a partition that moves to this node later is in the
// view then, as an adding replica.
//
// Only directories that are replicas are touched: named <topic>-<index>
// and holding the topic-id file every opened replica writes.
func (n *Node) removeStrays(want map[tpKey]bool) {
	ents, err := os.ReadDir(n.cfg.DataDir)
	if err != nil {
		n.logger.Warn("listing the data directory for stray replicas", "err", err)
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(e.Name(), '-')
		if i <= 0 {
			continue
		}
		p, err := strconv.ParseInt(e.Name()[i+1:], 10, 32)
		if err != nil || p < 0 {
			continue
		}
		k := tpKey{e.Name()[:i], int32(p)}
		dir := filepath.Join(n.cfg.DataDir, e.Name())
		if want[k] || n.replica(k.topic, k.partition) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "topic-id")); err != nil {
			continue
		}
		n.logger.Info("replica not assigned to this node any more; deleting", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			n.logger.Warn("deleting stray replica", "dir", dir, "err", err)
		}
	}
}
