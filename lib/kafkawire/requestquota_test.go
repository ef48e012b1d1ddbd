package kafkawire

import (
	"bufio"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The request quota's hook: each request is begun with the connection's
// context before its handler runs, the handler runs in the context the
// hook returns, and the throttle done reports goes into the response's
// throttle_time_ms when that is shorter (ApiVersions, answered by the
// server itself, included). A hook that fails closes the connection.
func TestBeginRequest(t *testing.T) {
	type key struct{}
	var mu sync.Mutex
	var begun, finished int
	throttle := 250 * time.Millisecond
	fail := false
	cfg := Config{
		APIs: []API{{Key: kmsg.Metadata, MinVersion: 0, MaxVersion: 12,
			Handle: func(ctx context.Context, req *Request) (kmsg.Response, error) {
				if ctx.Value(key{}) != "begun" {
					return nil, errors.New("handler not run in the hook's context")
				}
				resp := kmsg.NewPtrMetadataResponse()
				resp.ThrottleMillis = 100 // a byte quota's, say: the longer wins
				return resp, nil
			}}},
		BeginRequest: func(ctx context.Context) (context.Context, func() time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return ctx, nil, context.Canceled
			}
			begun++
			return context.WithValue(ctx, key{}, "begun"), func() time.Duration {
				mu.Lock()
				defer mu.Unlock()
				finished++
				return throttle
			}, nil
		},
	}
	_, c := startServer(t, cfg)
	r := bufio.NewReader(c)

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	if _, err := c.Write(encodeRequest(1, md)); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(12)
	readResponse(t, r, resp, true)
	if resp.ThrottleMillis != 250 {
		t.Fatalf("Metadata throttle_time_ms %d, want the hook's 250", resp.ThrottleMillis)
	}

	mu.Lock()
	throttle = 50 * time.Millisecond
	mu.Unlock()
	if _, err := c.Write(encodeRequest(2, md)); err != nil {
		t.Fatal(err)
	}
	readResponse(t, r, resp, true)
	if resp.ThrottleMillis != 100 {
		t.Fatalf("Metadata throttle_time_ms %d, want the handler's longer 100", resp.ThrottleMillis)
	}

	mu.Lock()
	throttle = 1500*time.Microsecond + time.Nanosecond
	mu.Unlock()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	if _, err := c.Write(encodeRequest(3, av)); err != nil {
		t.Fatal(err)
	}
	avr := kmsg.NewPtrApiVersionsResponse()
	avr.SetVersion(3)
	readResponse(t, r, avr, false)
	if avr.ThrottleMillis != 2 {
		t.Fatalf("ApiVersions throttle_time_ms %d, want 1.5ms rounded up to 2", avr.ThrottleMillis)
	}
	mu.Lock()
	if begun != 3 || finished != 3 {
		t.Errorf("begun %d, finished %d; want 3 each", begun, finished)
	}
	fail = true
	mu.Unlock()

	// Held back until the connection went away: closed, unanswered.
	if _, err := c.Write(encodeRequest(4, md)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the connection answered a request its hook refused; want it closed")
	}
}
