package serve

import (
	"slices"
	"strings"
	"testing"
)

func TestParseListeners(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Listener
		wantErr string
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "external=http://n1.example.com:31102", want: []Listener{{"external", "http://n1.example.com:31102"}}},
		{in: "external=n1.example.com:31102, lan=https://10.0.0.5:9102", want: []Listener{{"external", "http://n1.example.com:31102"}, {"lan", "https://10.0.0.5:9102"}}},
		{in: "external", wantErr: "not NAME=URL"},
		{in: "External=http://x:1", wantErr: "lower-case"},
		{in: "a_b=http://x:1", wantErr: "lower-case"},
		{in: "-a=http://x:1", wantErr: "lower-case"},
		{in: "a=http://x:1,a=http://y:1", wantErr: "named twice"},
		{in: "a=ftp://x:1", wantErr: "not an http(s) base URL"},
		{in: "a=http://", wantErr: "not an http(s) base URL"},
	} {
		got, err := ParseListeners(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseListeners(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseListeners(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
