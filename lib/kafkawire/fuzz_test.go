package kafkawire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzDecode feeds arbitrary frames to the request decoder: it must never
// panic, and whatever decodes must encode again. The seeds are valid
// requests of every key kmsg knows at their lowest and highest version,
// so mutations start from real shapes. `make test` runs the seeds; `make
// test-long` fuzzes.
func FuzzDecode(f *testing.F) {
	var apis []API
	h := func(context.Context, *Request) (kmsg.Response, error) { return nil, nil }
	for key := kmsg.Key(0); key < 100; key++ {
		req := key.Request()
		if req == nil || key == kmsg.ApiVersions {
			continue
		}
		apis = append(apis, API{Key: key, MinVersion: 0, MaxVersion: req.MaxVersion(), Handle: h})
		for _, v := range []int16{0, req.MaxVersion()} {
			req.SetVersion(v)
			f.Add(encodeRequest(1, req)[4:])
		}
	}
	// SaslAuthenticate carrying the messages of the mechanisms the Kafka
	// listener offers, well formed and not.
	for _, msg := range []string{"\x00alice\x00strata_token", "a\x00b\x00c\x00d", "", "n,,\x01auth=Bearer eyJ.x.y\x01\x01", "n,,\x01\x01"} {
		for _, v := range []int16{0, 1, 2} {
			sa := kmsg.NewPtrSASLAuthenticateRequest()
			sa.SetVersion(v)
			sa.SASLAuthBytes = []byte(msg)
			f.Add(encodeRequest(1, sa)[4:])
		}
	}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	f.Add(encodeRequest(1, av)[4:])
	s, err := NewServer(Config{APIs: apis})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, err := s.Decode(frame)
		if err != nil {
			// An error response must encode too.
			if req != nil {
				if resp := errorResponse(req.Header, kerr.InvalidRequest.Code); resp != nil {
					encodeResponse(req.Header, req.Version, resp.IsFlexible(), resp)
				}
			}
			return
		}
		_ = req.Body.AppendTo(nil)
	})
}

// FuzzFraming feeds arbitrary byte streams to one connection of a server
// whose frame limits are small (64 bytes before login, 1 KiB after), with
// authentication required or not: oversized, truncated and mis-keyed
// frames before and after login must close the connection, never panic
// or hang, and every answer the server writes must be a whole frame.
// `make test` runs the seeds; `make test-long` fuzzes.
func FuzzFraming(f *testing.F) {
	login := func() []byte {
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = "TEST"
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.SetVersion(2)
		au.SASLAuthBytes = []byte("good:alice")
		return append(encodeRequest(1, hs), encodeRequest(2, au)...)
	}
	apiVersions := kmsg.NewPtrApiVersionsRequest()
	apiVersions.SetVersion(3)
	big := metadataRequest(12, strings.Repeat("x", 200))
	for _, required := range []bool{true, false} {
		f.Add(encodeRequest(1, apiVersions), required)
		f.Add(binary.BigEndian.AppendUint32(nil, 100<<20), required)
		f.Add(encodeRequest(1, big), required)
		f.Add(encodeRequest(1, big)[:20], required)
		f.Add(append(login(), encodeRequest(3, big)...), required)
		f.Add(append(login(), binary.BigEndian.AppendUint32(nil, 2<<10)...), required)
		f.Add(append(login(), encodeRequest(3, metadataRequest(12, "y"))[:15]...), required)
	}
	f.Fuzz(func(t *testing.T, stream []byte, required bool) {
		s, err := NewServer(Config{APIs: []API{whoAPI()}, Auth: testAuth(required), Logger: slog.New(slog.DiscardHandler),
			MaxPreAuthBytes: 64, MaxRequestBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		server, client := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			s.serveConn(server)
		}()
		answers := make(chan error, 1)
		go func() {
			// Every answer is a whole frame, up to the connection's end.
			for {
				if _, err := readFrame(client, 1<<20); err != nil {
					if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
						err = nil
					}
					answers <- err
					return
				}
			}
		}()
		client.SetDeadline(time.Now().Add(30 * time.Second))
		client.Write(stream) // the server may close before taking it all
		client.Close()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Fatal("the connection was not closed")
		}
		if err := <-answers; err != nil {
			t.Fatalf("answer: %v", err)
		}
	})
}
