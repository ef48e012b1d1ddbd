// Package embeds3 is the embedded S3-compatible server of `strata dev` and
// the tests: gofakes3 over a directory (its s3afero backend), served over
// real HTTP on its own address, so tiering talks to it through the same
// aws-sdk-go-v2 code path it uses for AWS S3, MinIO, R2 or Ceph.
//
// Objects live as files under DIR/buckets/<bucket>/<key> and their
// metadata under DIR/metadata, so the data survives a restart. It accepts
// any credentials and wants path-style addressing. It is a development
// server: objects are written in place, so a crash mid-write can leave a
// torn object that a real S3 would never show.
package embeds3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"
)

// Server is a running embedded S3 server. Close it to stop.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	err  error

	closeOnce sync.Once
}

// Start serves an S3 API on addr (host:port; port 0 picks one) with objects
// stored under dir, which is created if missing. Buckets are created on
// first use.
func Start(addr, dir string) (*Server, error) {
	if dir == "" {
		return nil, errors.New("embeds3: directory is empty")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embeds3: %w", err)
	}
	backend, err := s3afero.MultiBucket(afero.NewBasePathFs(afero.NewOsFs(), dir))
	if err != nil {
		return nil, fmt.Errorf("embeds3: backend: %w", err)
	}
	faker := gofakes3.New(backend, gofakes3.WithAutoBucket(true), gofakes3.WithTimeSkewLimit(0))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embeds3: listen: %w", err)
	}
	s := &Server{
		ln:   ln,
		srv:  &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// URL is the endpoint to give an S3 client, for example
// "http://127.0.0.1:9096".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server, waiting up to ctx for requests in flight. Safe
// to call twice.
func (s *Server) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		err = s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		<-s.done
		if err == nil {
			err = s.err
		}
	})
	return err
}
