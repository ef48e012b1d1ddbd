package serve

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/strata-mq/strata/lib/audit"
)

// startAudit builds the process's audit logger (lib/audit): JSON lines
// appended to path, or the process log's handler when path is empty, so
// the lines carry service=<name> and trace ids like every other line.
// A shutdown hook writes the pending "suppressed" summaries and closes
// the file; it is the first hook registered, so it runs last and sees
// the refusals of the drain. Services reach the logger through
// Guard().Audit().
func (p *Process) startAudit(path string) (*audit.Logger, error) {
	h := p.logger.Handler()
	var f *os.File
	if path != "" {
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return nil, fmt.Errorf("serve: audit log: %w", err)
		}
		h = TraceHandler(slog.NewJSONHandler(f, nil)).WithAttrs([]slog.Attr{slog.String("service", p.name)})
	}
	l := audit.New(h, audit.SamplerConfig{})
	p.OnShutdown("audit log", func(ctx context.Context) error {
		l.Flush(ctx)
		if f != nil {
			return f.Close()
		}
		return nil
	})
	return l, nil
}
