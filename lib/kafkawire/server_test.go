package kafkawire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// encodeRequest frames req as a client would: size, header v1 or v2, body.
func encodeRequest(corr int32, req kmsg.Request) []byte {
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// readResponse reads one response frame and decodes it into resp, whose
// version must be set; it returns the correlation id.
func readResponse(t *testing.T, r io.Reader, resp kmsg.Response, flexHeader bool) int32 {
	t.Helper()
	frame, err := readFrame(r, 1<<30)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if flexHeader {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decode %s response: %v", kmsg.NameForKey(resp.Key()), err)
	}
	return corr
}

// startServer serves cfg on a loopback port and returns a connection to it.
func startServer(t *testing.T, cfg Config) (*Server, net.Conn) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return s, c
}

// metadataAPI answers Metadata with the request's first topic name as
// cluster id once release (when not nil) is closed, so tests can hold a
// request back.
func metadataAPI(release map[string]chan struct{}) API {
	return API{Key: kmsg.Metadata, MinVersion: 0, MaxVersion: 12, Handle: func(ctx context.Context, req *Request) (kmsg.Response, error) {
		m := req.Body.(*kmsg.MetadataRequest)
		name := ""
		if len(m.Topics) > 0 && m.Topics[0].Topic != nil {
			name = *m.Topics[0].Topic
		}
		switch name {
		case "panic":
			panic("handler bug")
		case "fail":
			return nil, errors.New("backend down")
		case "silent":
			return nil, nil
		}
		if ch := release[name]; ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.ClusterID = &name
		return resp, nil
	}}
}

func metadataRequest(version int16, topic string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(version)
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = &topic
	req.Topics = append(req.Topics, t)
	return req
}

func TestApiVersions(t *testing.T) {
	for _, version := range []int16{0, 1, 2, 3} {
		_, c := startServer(t, Config{APIs: []API{metadataAPI(nil)}})
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(version)
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
		if _, err := c.Write(encodeRequest(7, req)); err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(version)
		if corr := readResponse(t, c, resp, false); corr != 7 {
			t.Fatalf("v%d: correlation id %d, want 7", version, corr)
		}
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != 2 {
			t.Fatalf("v%d: error %d, keys %+v", version, resp.ErrorCode, resp.ApiKeys)
		}
		if k := resp.ApiKeys[0]; k.ApiKey != 3 || k.MinVersion != 0 || k.MaxVersion != 12 {
			t.Fatalf("v%d: metadata versions %+v", version, k)
		}
	}
}

// A newer ApiVersions than served is answered at v0 with
// UNSUPPORTED_VERSION and the ranges (KIP-511), and the connection stays
// usable.
func TestApiVersionsTooNew(t *testing.T) {
	_, c := startServer(t, Config{APIs: []API{metadataAPI(nil)}})
	frame := encodeRequest(1, func() kmsg.Request { r := kmsg.NewPtrApiVersionsRequest(); r.SetVersion(3); return r }())
	binary.BigEndian.PutUint16(frame[6:], 99) // version 99
	c.Write(frame)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	readResponse(t, c, resp, false)
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 2 {
		t.Fatalf("error %d, keys %+v", resp.ErrorCode, resp.ApiKeys)
	}
	c.Write(encodeRequest(2, metadataRequest(12, "after")))
	m := kmsg.NewPtrMetadataResponse()
	m.SetVersion(12)
	if corr := readResponse(t, c, m, true); corr != 2 || *m.ClusterID != "after" {
		t.Fatalf("corr %d cluster %v", corr, m.ClusterID)
	}
}

// Pipelined requests are answered in the order they were sent.
func TestResponsesInOrder(t *testing.T) {
	release := map[string]chan struct{}{"first": make(chan struct{})}
	s, c := startServer(t, Config{APIs: []API{metadataAPI(release)}})
	_ = s
	c.Write(encodeRequest(1, metadataRequest(4, "first")))
	c.Write(encodeRequest(2, metadataRequest(12, "second")))
	c.Write(encodeRequest(3, metadataRequest(12, "silent"))) // no answer
	c.Write(encodeRequest(4, metadataRequest(9, "third")))
	close(release["first"])
	r := bufio.NewReader(c)
	for i, want := range []struct {
		corr    int32
		version int16
		name    string
	}{{1, 4, "first"}, {2, 12, "second"}, {4, 9, "third"}} {
		m := kmsg.NewPtrMetadataResponse()
		m.SetVersion(want.version)
		corr := readResponse(t, r, m, want.version >= 9)
		if corr != want.corr || m.ClusterID == nil || *m.ClusterID != want.name {
			t.Fatalf("response %d: corr %d cluster %v, want %d %s", i, corr, m.ClusterID, want.corr, want.name)
		}
	}
}

// expectClosed fails unless the server closes c (after any bytes it sends).
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection not closed by the server")
		}
	}
}

func TestBadRequestsClose(t *testing.T) {
	cases := map[string]func() []byte{
		"unknown key": func() []byte {
			f := encodeRequest(1, metadataRequest(12, "x"))
			binary.BigEndian.PutUint16(f[4:], 999)
			return f
		},
		"key not served": func() []byte {
			r := kmsg.NewPtrFindCoordinatorRequest()
			return encodeRequest(1, r)
		},
		"too large":     func() []byte { return []byte{0x7f, 0, 0, 0} },
		"negative size": func() []byte { return []byte{0xff, 0xff, 0xff, 0xff} },
		"short header":  func() []byte { return []byte{0, 0, 0, 3, 0, 3, 0} },
		"handler error": func() []byte { return encodeRequest(1, metadataRequest(12, "fail")) },
		"handler panic": func() []byte { return encodeRequest(1, metadataRequest(12, "panic")) },
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			s, c := startServer(t, Config{APIs: []API{metadataAPI(nil)}, MaxRequestBytes: 1 << 20})
			c.Write(frame())
			expectClosed(t, c)
			// The server still serves new connections.
			c2, err := net.Dial("tcp", c.RemoteAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			c2.SetDeadline(time.Now().Add(30 * time.Second))
			c2.Write(encodeRequest(5, metadataRequest(12, "ok")))
			m := kmsg.NewPtrMetadataResponse()
			m.SetVersion(12)
			if corr := readResponse(t, c2, m, true); corr != 5 {
				t.Fatalf("corr %d", corr)
			}
			_ = s
		})
	}
}

// A body that does not decode gets INVALID_REQUEST where the response has
// a top-level error code, then the connection closes; an unsupported
// version gets UNSUPPORTED_VERSION.
func TestMalformedBodyAnswersThenCloses(t *testing.T) {
	find := API{Key: kmsg.FindCoordinator, MinVersion: 0, MaxVersion: 3, Handle: func(context.Context, *Request) (kmsg.Response, error) {
		return kmsg.NewPtrFindCoordinatorResponse(), nil
	}}
	for _, tc := range []struct {
		name    string
		version int16
		mangle  func([]byte) []byte
		code    int16
	}{
		{"truncated body", 1, func(f []byte) []byte {
			f = f[:len(f)-3]
			binary.BigEndian.PutUint32(f, uint32(len(f)-4))
			return f
		}, kerr.InvalidRequest.Code},
		{"version too new", 3, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[6:], 3)
			return f
		}, kerr.UnsupportedVersion.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			find.MaxVersion = 2
			_, c := startServer(t, Config{APIs: []API{find}})
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.SetVersion(tc.version)
			r.CoordinatorKey = "group"
			c.Write(tc.mangle(encodeRequest(9, r)))
			resp := kmsg.NewPtrFindCoordinatorResponse()
			resp.SetVersion(tc.version)
			if corr := readResponse(t, c, resp, tc.version >= 3); corr != 9 || resp.ErrorCode != tc.code {
				t.Fatalf("corr %d error %d, want 9 %d", corr, resp.ErrorCode, tc.code)
			}
			expectClosed(t, c)
		})
	}
}

func TestNewServerChecks(t *testing.T) {
	h := func(context.Context, *Request) (kmsg.Response, error) { return nil, nil }
	for name, apis := range map[string][]API{
		"api versions": {{Key: kmsg.ApiVersions, MaxVersion: 3, Handle: h}},
		"no handler":   {{Key: kmsg.Metadata, MaxVersion: 3}},
		"twice":        {{Key: kmsg.Metadata, MaxVersion: 3, Handle: h}, {Key: kmsg.Metadata, MaxVersion: 3, Handle: h}},
		"bad range":    {{Key: kmsg.Metadata, MinVersion: 4, MaxVersion: 3, Handle: h}},
		"unknown key":  {{Key: 999, MaxVersion: 3, Handle: h}},
	} {
		if _, err := NewServer(Config{APIs: apis}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Pipelined requests are handled one at a time in arrival order: the
// second does not start before the first returns (an idempotent
// producer's batches depend on it).
func TestRequestsHandledInOrder(t *testing.T) {
	var mu sync.Mutex
	var events []string
	release := make(chan struct{})
	api := API{Key: kmsg.Metadata, MinVersion: 0, MaxVersion: 12, Handle: func(ctx context.Context, req *Request) (kmsg.Response, error) {
		name := *req.Body.(*kmsg.MetadataRequest).Topics[0].Topic
		mu.Lock()
		events = append(events, "start "+name)
		mu.Unlock()
		if name == "first" {
			<-release
		}
		mu.Lock()
		events = append(events, "end "+name)
		mu.Unlock()
		resp := kmsg.NewPtrMetadataResponse()
		resp.ClusterID = &name
		return resp, nil
	}}
	_, c := startServer(t, Config{APIs: []API{api}})
	c.Write(encodeRequest(1, metadataRequest(12, "first")))
	c.Write(encodeRequest(2, metadataRequest(12, "second")))
	// Both are read; only the first may have started.
	mu.Lock()
	n := len(events)
	mu.Unlock()
	if n > 1 {
		t.Fatalf("events before release: %v", events)
	}
	close(release)
	r := bufio.NewReader(c)
	for _, want := range []int32{1, 2} {
		m := kmsg.NewPtrMetadataResponse()
		m.SetVersion(12)
		if corr := readResponse(t, r, m, true); corr != want {
			t.Fatalf("corr %d, want %d", corr, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"start first", "end first", "start second", "end second"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}

// readFrame reads one size-prefixed response of at most max bytes.
func readFrame(r io.Reader, max int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > max {
		return nil, fmt.Errorf("response of %d bytes (limit %d)", uint32(n), max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
