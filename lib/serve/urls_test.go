package serve

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseURLs(t *testing.T) {
	cases := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{" , ", nil, false},
		{"http://a:1", []string{"http://a:1"}, false},
		{"http://a:1/, https://b:2//", []string{"http://a:1", "https://b:2"}, false},
		{"127.0.0.1:9093,c:3", []string{"http://127.0.0.1:9093", "http://c:3"}, false},
		{"ftp://a:1", nil, true},
		{"http://", nil, true},
		{"http://a:1,grpc://b", nil, true},
	}
	for _, c := range cases {
		got, err := ParseURLs(c.in)
		if (err != nil) != c.wantErr || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseURLs(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "http(s) base URL") {
			t.Errorf("ParseURLs(%q) error %q does not say what is wanted", c.in, err)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9092":         "http://127.0.0.1:9092",
		"http://127.0.0.1:9092/": "http://127.0.0.1:9092",
		"https://gw.example":     "https://gw.example",
	} {
		if got := NormalizeURL(in); got != want {
			t.Errorf("NormalizeURL(%q) = %q, want %q", in, got, want)
		}
	}
}
