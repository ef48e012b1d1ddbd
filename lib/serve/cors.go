package serve

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rs/cors"
)

// CORS lets web pages on other origins call a service's Connect API, so a
// browser application using the TypeScript client (over Connect's fetch
// transport) can talk to the gateway, storage nodes and coordinator. It is
// off unless origins are configured (--cors-allowed-origins); `strata dev`
// turns it on for pages served from localhost.
//
// The allowed methods and headers are those the Connect, gRPC-Web and gRPC
// protocols use; the exposed headers let the browser read Connect and gRPC
// error and encoding headers.
var (
	corsAllowedMethods = []string{http.MethodGet, http.MethodPost}
	corsAllowedHeaders = []string{
		"Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms",
		"Connect-Accept-Encoding", "Connect-Content-Encoding", "Accept-Encoding", "Content-Encoding",
		"Grpc-Timeout", "X-Grpc-Web", "X-User-Agent", "Authorization",
	}
	corsExposedHeaders = []string{
		"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin",
		"Content-Encoding", "Connect-Content-Encoding",
	}
)

// corsMaxAge is how long a browser may cache a preflight answer, in seconds.
const corsMaxAge = 7200

// ParseCORSOrigins splits a comma-separated --cors-allowed-origins value and
// checks each entry: "*" (any origin), or scheme://host[:port] with at most
// one "*" standing for any characters (for example "http://localhost:*").
// Empty input gives no origins (CORS off).
func ParseCORSOrigins(s string) ([]string, error) {
	var out, bad []string
	for _, o := range strings.Split(s, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o != "*" {
			u, err := url.Parse(strings.Replace(o, "*", "1", 1)) // "1" parses as a host part or a port
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
				u.Path != "" || u.RawQuery != "" || strings.Count(o, "*") > 1 {
				bad = append(bad, o)
				continue
			}
		}
		out = append(out, o)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: want * or scheme://host[:port], with at most one * wildcard", strings.Join(bad, ", "))
	}
	return out, nil
}

// CORSHandler wraps h so that it answers CORS preflights and adds CORS
// headers for the given origins (see ParseCORSOrigins). With no origins it
// returns h unchanged.
func CORSHandler(origins []string, h http.Handler) http.Handler {
	if len(origins) == 0 {
		return h
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: corsAllowedMethods,
		AllowedHeaders: corsAllowedHeaders,
		ExposedHeaders: corsExposedHeaders,
		MaxAge:         corsMaxAge,
	}).Handler(h)
}
