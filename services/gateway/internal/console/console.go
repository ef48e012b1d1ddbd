// Package console serves the Strata Console, the web page built from
// ts/console (`make console`) into dist/ and embedded here, at /console/
// on the gateway's own origin. The files carry no cluster data: the page
// asks the user for a token when the gateway wants one and calls the
// GatewayService API with it, so the files are served without
// authentication (serve.Process.HandlePublic). See docs/design/console.md.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Path is where the console is served.
const Path = "/console/"

//go:embed all:dist
var dist embed.FS

// csp allows the page its own scripts, styles and API calls, and nothing
// from elsewhere. Inline style attributes are allowed for the charts.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Handler serves the embedded bundle under Path. Hashed assets are
// cached for good; index.html is revalidated so a new gateway's bundle
// is picked up. A path that names no file is the page's own route
// (/console/topics/orders), answered with index.html.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	index, _ := fs.ReadFile(files, "index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", csp)
		name := strings.TrimPrefix(path.Clean(r.URL.Path), strings.TrimSuffix(Path, "/"))
		name = strings.TrimPrefix(name, "/")
		if name != "" && name != "index.html" {
			if st, err := fs.Stat(files, name); err == nil && !st.IsDir() {
				if strings.HasPrefix(name, "assets/") {
					h.Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				http.ServeFileFS(w, r, files, name)
				return
			}
			if strings.HasPrefix(name, "assets/") || path.Ext(name) != "" {
				http.NotFound(w, r)
				return
			}
		}
		if index == nil {
			http.Error(w, "the console was not built into this gateway (make console)", http.StatusNotFound)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
}
