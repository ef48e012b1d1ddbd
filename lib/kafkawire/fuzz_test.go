package kafkawire

import (
	"context"
	"testing"

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
				if resp := errorResponse(req.Header, codeInvalidRequest); resp != nil {
					encodeResponse(req.Header, req.Version, resp.IsFlexible(), resp)
				}
			}
			return
		}
		_ = req.Body.AppendTo(nil)
	})
}
