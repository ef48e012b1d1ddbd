package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The handler serves the embedded page at /console/ and for the page's
// own routes, its hashed assets cached for good, and nothing else.
func TestHandler(t *testing.T) {
	assets, err := fs.Glob(dist, "dist/assets/*.js")
	if err != nil || len(assets) == 0 {
		t.Fatalf("no script in the embedded bundle (%v): run make console", err)
	}
	script := "/console/" + strings.TrimPrefix(assets[0], "dist/")
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for _, path := range []string{"/console/", "/console/index.html", "/console/topics/orders", "/console/groups/billing"} {
		w := get(http.MethodGet, path)
		body, _ := io.ReadAll(w.Body)
		if w.Code != http.StatusOK || !strings.Contains(string(body), "<title>Strata Console</title>") || w.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: %d %q; want the page, revalidated", path, w.Code, w.Header())
		}
		if !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no content security policy", path)
		}
	}
	w := get(http.MethodGet, script)
	if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), "javascript") || !strings.Contains(w.Header().Get("Cache-Control"), "immutable") {
		t.Errorf("GET %s: %d %q; want the script, cached", script, w.Code, w.Header())
	}
	for _, path := range []string{"/console/assets/nope.js", "/console/favicon.ico"} {
		if w := get(http.MethodGet, path); w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d; want 404", path, w.Code)
		}
	}
	if w := get(http.MethodPost, "/console/"); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d; want 405", w.Code)
	}
}
