package tlsconfig

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often a [Source] reads its files to see
// whether they changed.
const DefaultPollInterval = time.Second

// Option configures [Load].
type Option func(*options)

type options struct {
	interval   time.Duration
	logger     *slog.Logger
	onReload   func(error)
	minVersion uint16
}

// WithPollInterval sets how often the files are read to see whether they
// changed. Default [DefaultPollInterval]; zero or negative keeps it.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.interval = d
		}
	}
}

// WithLogger sets the logger of the files: one info line when they load
// and each time they reload, one warn line per change that does not load
// (naming the file and the problem, never its contents). Default
// slog.Default(); nil keeps it.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithOnReload sets a function called after each reload attempt with its
// outcome: nil when new files were loaded, the error when they were not
// (the previous ones stay in use). It runs on the watcher's goroutine (or
// [Source.Reload]'s caller), may call the Source's methods, and should
// return quickly. Default none.
func WithOnReload(fn func(err error)) Option {
	return func(o *options) { o.onReload = fn }
}

// WithMinVersion sets the lowest TLS version of every config the Source
// makes: tls.VersionTLS13 (the default) or tls.VersionTLS12, for peers
// that cannot speak 1.3. [Load] refuses other values.
func WithMinVersion(v uint16) Option {
	return func(o *options) { o.minVersion = v }
}

// ParseMinVersion reads a minimum TLS version as an operator writes it,
// "1.2" or "1.3", for [WithMinVersion].
func ParseMinVersion(s string) (uint16, error) {
	switch s {
	case "1.3":
		return tls.VersionTLS13, nil
	case "1.2":
		return tls.VersionTLS12, nil
	}
	return 0, fmt.Errorf("tlsconfig: TLS version %q: want 1.2 or 1.3", s)
}

// Source holds the certificate, key and CA pool read from [Files] and
// keeps them current: a goroutine reads the files every poll interval and,
// when their contents changed, parses them and swaps them in. The configs
// from [Source.ServerConfig] and [Source.ClientConfig] read the current
// ones at every handshake, so a renewed certificate or CA bundle applies
// to new connections without a restart; connections already open keep
// what they were set up with.
//
// A change that does not load (a half-written file, a key that does not
// match its certificate, an expired certificate) leaves the previous
// files in use; when a second poll finds the files unchanged,
// [Source.Err] reports it, the logger warns once, and the next change is
// tried again. Waiting for that second poll keeps an update caught
// between renaming a new certificate and its new key into place from
// being reported: the next poll sees the pair complete.
//
// Methods are safe for concurrent use. Close stops the watcher.
type Source struct {
	files Files
	opts  options
	cur   atomic.Pointer[material]

	mu        sync.Mutex        // serializes reloads; guards the fields below
	attempted [sha256.Size]byte // contents last loaded or reported as failing
	unsettled [sha256.Size]byte // failing contents seen once, reported if seen again
	lastErr   error

	cancel context.CancelFunc
	done   chan struct{}
}

// Load reads f's files (f.Cert and f.Key together, f.CA alone for a
// client that presents no certificate) and starts watching them until ctx
// ends or [Source.Close] is called. It fails, starting nothing, when the
// files do not load.
func Load(ctx context.Context, f Files, opts ...Option) (*Source, error) {
	o := options{interval: DefaultPollInterval, logger: slog.Default(), minVersion: tls.VersionTLS13}
	for _, opt := range opts {
		opt(&o)
	}
	if o.minVersion != tls.VersionTLS12 && o.minVersion != tls.VersionTLS13 {
		return nil, fmt.Errorf("tlsconfig: minimum TLS version %#04x: want TLS 1.2 or 1.3", o.minVersion)
	}
	switch {
	case !f.Enabled():
		return nil, errors.New("tlsconfig: no certificate, key or CA bundle to load")
	case (f.Cert == "") != (f.Key == ""):
		return nil, errors.New("tlsconfig: a certificate and its key go together; got only one")
	}
	s := &Source{files: f, opts: o, done: make(chan struct{})}
	key, m, err := s.read()
	if err != nil {
		return nil, err
	}
	s.attempted = key
	s.cur.Store(m)
	s.logLoaded("tls files loaded", m)
	ctx, s.cancel = context.WithCancel(ctx)
	go s.watch(ctx)
	return s, nil
}

// Close stops watching the files. The configs made from s keep working
// with the files last loaded. Close is safe to call more than once; it
// returns nil.
func (s *Source) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// Err returns the error of the last reload attempt, or nil when the files
// last seen were loaded.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// Certificate returns the current certificate and key (with Leaf set), or
// nil when the Source has no certificate. Do not modify it.
func (s *Source) Certificate() *tls.Certificate { return s.cur.Load().cert }

// CAPool returns the current pool of CA certificates that verify peers,
// or nil when the Source has no CA bundle. Do not modify it.
func (s *Source) CAPool() *x509.CertPool { return s.cur.Load().pool }

// Reload reads the files now, without waiting for the next poll, and
// loads them when they changed since the last attempt. It returns that
// attempt's error: nil when the files loaded or were unchanged since a
// successful load. A SIGHUP handler may call it.
func (s *Source) Reload() error {
	_, err := s.reload(false)
	return err
}

// reload reads the files and loads them when they changed since the last
// attempt, reporting the outcome (Err, the log, the callback, the last
// after the lock is released so that it may call s's methods). tried is
// false when nothing was attempted.
//
// With settle (the watcher's polls), contents that do not load are
// reported only when the next poll finds them unchanged: an updater
// between renaming a new certificate and its new key into place, or still
// writing a file, is given one poll interval to finish.
func (s *Source) reload(settle bool) (tried bool, err error) {
	tried, err = s.reloadLocked(settle)
	if tried && s.opts.onReload != nil {
		s.opts.onReload(err)
	}
	return tried, err
}

func (s *Source) reloadLocked(settle bool) (tried bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key, m, err := s.read()
	if key == s.attempted {
		return false, s.lastErr
	}
	if err != nil && settle && key != s.unsettled {
		s.unsettled = key
		return false, s.lastErr
	}
	s.unsettled = [sha256.Size]byte{}
	s.attempted = key
	s.lastErr = err
	if err != nil {
		s.opts.logger.Warn("tls files changed but did not load; the previous ones stay in use", "err", err)
		return true, err
	}
	s.cur.Store(m)
	s.logLoaded("tls files reloaded", m)
	return true, nil
}

// logLoaded logs the files of m and what its certificate says: paths,
// serial number, expiry and principal, none of them secret.
func (s *Source) logLoaded(msg string, m *material) {
	attrs := []any{"cert", s.files.Cert, "key", s.files.Key, "ca", s.files.CA}
	if m.cert != nil {
		leaf := m.cert.Leaf
		attrs = append(attrs, "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter.UTC())
		if p, err := PrincipalOf(leaf); err == nil {
			attrs = append(attrs, "principal", p.String())
		}
	}
	s.opts.logger.Info(msg, attrs...)
}

func (s *Source) watch(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.opts.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reload(true)
		}
	}
}

// read reads and parses the files. key identifies what was read (the
// contents, or the read errors), so that an unchanged failure is neither
// retried nor logged again.
//
// Contents are compared rather than modification times: a file rewritten
// within the file system's timestamp granularity, or a symlink swapped to
// a directory with the same times (Kubernetes secret volumes), has the
// same metadata, and reading three small files a second costs nothing.
// Paths are read through symlinks at every poll, so a swapped link is
// followed to its new target.
func (s *Source) read() ([sha256.Size]byte, *material, error) {
	raw, errs := readFiles(s.files)
	h := sha256.New()
	for _, b := range raw {
		var n [9]byte
		if b != nil {
			n[0] = 1
		}
		binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, e := range errs {
		h.Write([]byte(e.Error()))
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	if len(errs) > 0 {
		return key, nil, oneError(errs)
	}
	m, errs := parseMaterial(s.files, raw, time.Now())
	if len(errs) > 0 {
		return key, nil, oneError(errs)
	}
	return key, m, nil
}

// oneError joins file problems into one error on one line.
func oneError(errs []*fileError) error {
	if len(errs) == 1 {
		return errs[0]
	}
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = strings.TrimPrefix(e.Error(), "tlsconfig: ")
	}
	return errors.New("tlsconfig: " + strings.Join(parts, "; "))
}
