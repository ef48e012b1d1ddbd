package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// PollInterval is how often [WaitReady] asks /readyz.
const PollInterval = 100 * time.Millisecond

// Ready asks the /readyz of the admin listener at adminURL (such as
// "http://127.0.0.1:9192") once. It reports whether the answer was 200 and,
// when it was not, what came back in one line ("503 etcd: no leader /
// metadata: ok", "connection refused", "no answer"). Bound it with ctx or
// the client's timeout.
func Ready(ctx context.Context, client *http.Client, adminURL string) (ready bool, answer string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(adminURL, "/")+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return false, "connection refused"
		}
		return false, "no answer"
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return true, "200"
	}
	return false, fmt.Sprintf("%d %s", resp.StatusCode, oneLine(string(body)))
}

// NotReadyError is [WaitReady]'s error when the process never answered
// 200: Last is its last answer (see [Ready]) and Err why the wait ended
// (ctx's error, or what gone returned).
type NotReadyError struct {
	URL  string // the /readyz asked
	Last string
	Err  error
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("%s: not ready (last answer: %s): %v", e.URL, e.Last, e.Err)
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// WaitReady asks adminURL's /readyz every [PollInterval] until it answers
// 200 (nil), ctx ends, or gone, asked before each try, returns an error
// (typically: the process has exited). The error is then a
// *[NotReadyError] wrapping ctx's or gone's error. gone may be nil.
func WaitReady(ctx context.Context, client *http.Client, adminURL string, gone func() error) error {
	last := "no answer yet"
	fail := func(err error) error {
		return &NotReadyError{URL: strings.TrimSuffix(adminURL, "/") + "/readyz", Last: last, Err: err}
	}
	for {
		if gone != nil {
			if err := gone(); err != nil {
				return fail(err)
			}
		}
		ok, answer := Ready(ctx, client, adminURL)
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		last = answer
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(PollInterval):
		}
	}
}

// oneLine folds s to one line: each non-blank line with its white space
// folded, joined by " / " (a /readyz body has a line per check).
func oneLine(s string) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " / ")
}
