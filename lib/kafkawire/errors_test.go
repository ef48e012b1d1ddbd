package kafkawire

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/kafkawire/wiretest"
)

// hasErrorCode reports whether v holds an ErrorCode field (at any depth)
// for which match holds.
func hasErrorCode(v reflect.Value, match func(int16) bool) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasErrorCode(v.Elem(), match)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16 && match(int16(v.Field(i).Int())) {
				return true
			}
			if hasErrorCode(v.Field(i), match) {
				return true
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if hasErrorCode(v.Index(i), match) {
				return true
			}
		}
	}
	return false
}

// decodesWithError encodes resp at version as the server would, decodes
// it as a client would, and reports whether the decoded answer carries
// code somewhere.
func decodesWithError(t *testing.T, resp kmsg.Response, version, code int16) bool {
	t.Helper()
	resp.SetVersion(version)
	b := resp.AppendTo(nil)
	got := kmsg.Key(resp.Key()).Response()
	got.SetVersion(version)
	if err := got.ReadFrom(b); err != nil {
		t.Fatalf("%s v%d: the error response does not decode: %v", kmsg.NameForKey(resp.Key()), version, err)
	}
	return hasErrorCode(reflect.ValueOf(got), func(c int16) bool { return c == code })
}

// TestErrorResponsesNeverReadAsSuccess covers every API key kmsg knows at
// every version: whatever the error paths answer (a request that did not
// decode or whose version is not served, with its header alone; a refused
// request, empty or naming items) decodes with the error in it. Where
// nothing can carry it, nothing is answered.
func TestErrorResponsesNeverReadAsSuccess(t *testing.T) {
	code := kerr.InvalidRequest.Code
	answered := 0
	for k := int16(0); k < 200; k++ {
		key := kmsg.Key(k)
		req := key.Request()
		if req == nil {
			continue
		}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			if resp := errorResponse(Header{Key: key, Version: v}, code); resp != nil {
				answered++
				if !decodesWithError(t, resp, v, code) {
					t.Errorf("%s v%d: the header-only error response reads as success", key.Name(), v)
				}
			}
			for _, populated := range []bool{false, true} {
				body := key.Request()
				body.SetVersion(v)
				if populated {
					wiretest.Populate(reflect.ValueOf(body))
					if p, ok := body.(*kmsg.ProduceRequest); ok {
						p.Acks = -1
					}
				}
				if resp := ErrorResponseFor(v, body, code); resp != nil {
					answered++
					if !decodesWithError(t, resp, v, code) {
						t.Errorf("%s v%d (populated %v): the error response reads as success", key.Name(), v, populated)
					}
				}
			}
		}
	}
	if answered < 500 {
		t.Fatalf("only %d error responses answered", answered)
	}
	// Versions without a top-level code: no answer from the header alone.
	for _, tc := range []struct {
		key     kmsg.Key
		version int16
	}{{kmsg.Metadata, 12}, {kmsg.Fetch, 6}, {kmsg.Produce, 9}, {kmsg.OffsetFetch, 1}, {kmsg.FindCoordinator, 4}, {kmsg.DescribeConfigs, 4}} {
		if resp := errorResponse(Header{Key: tc.key, Version: tc.version}, code); resp != nil {
			t.Errorf("%s v%d: answered from the header alone", tc.key.Name(), tc.version)
		}
	}
	// A Produce with acks=0 expects no answer; Metadata for every topic
	// before v13 has no place for the error.
	p := kmsg.NewPtrProduceRequest()
	wiretest.Populate(reflect.ValueOf(p))
	p.Acks = 0
	if ErrorResponseFor(9, p, code) != nil {
		t.Error("acks=0 Produce answered")
	}
	if ErrorResponseFor(12, kmsg.NewPtrMetadataRequest(), code) != nil {
		t.Error("Metadata v12 for every topic answered")
	}
	if r := ErrorResponseFor(13, kmsg.NewPtrMetadataRequest(), code); r == nil || r.(*kmsg.MetadataResponse).ErrorCode != code {
		t.Error("Metadata v13 not answered with its top-level code")
	}
}
