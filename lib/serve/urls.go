package serve

import (
	"fmt"
	"strings"
)

// ParseURLs parses a comma-separated list of Connect base URLs: the one
// rule of every --controller, --coordinator and --gateway flag. Elements
// are trimmed and empty ones dropped; an element without a scheme gets
// http:// (NormalizeURL); each must then be an http(s) URL with a host
// (CheckBaseURL). An empty list is no error: the caller says whether one
// is required.
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		u := NormalizeURL(e)
		if err := CheckBaseURL(u); err != nil {
			return nil, fmt.Errorf("want comma-separated http:// or https:// base URLs: %w", err)
		}
		out = append(out, u)
	}
	return out, nil
}

// NormalizeURL returns a base URL with a scheme (http:// when s has none)
// and without trailing slashes. It does not check the URL.
func NormalizeURL(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}
