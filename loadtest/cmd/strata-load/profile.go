package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// profileRun repeats the closed-loop run of workload w for d while taking
// a CPU profile of every cluster process (from its admin port's
// /debug/pprof/profile) and of the load generator. It is a separate run so
// that profiling never slows a run whose figures are reported. Profiles
// are written to dir as <service>-<id>.pprof and strata-load.pprof; the
// paths are returned.
func (r *runner) profileRun(ctx context.Context, w workload, d time.Duration, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	topic, err := r.createTopic(ctx, w, "profile")
	if err != nil {
		return nil, err
	}
	defer r.deleteTopic(context.WithoutCancel(ctx), topic)
	secs := int(d.Round(time.Second) / time.Second)
	secs = max(secs, 1)
	var (
		mu    sync.Mutex
		paths []string
		errs  []error
		wg    sync.WaitGroup
	)
	for _, p := range r.cpu.procs {
		if p.AdminAddress == "" {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", p.Service, p.ID))
		url := fmt.Sprintf("%s://%s/debug/pprof/profile?seconds=%d", r.adminScheme, p.AdminAddress, secs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fetchTo(ctx, r.admin, url, path, d+30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", p.Service, p.ID, err))
				return
			}
			paths = append(paths, path)
		}()
	}
	self := filepath.Join(dir, "strata-load.pprof")
	f, err := os.Create(self)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	_, runErr := r.runMax(ctx, w, topic, 0, d)
	pprof.StopCPUProfile()
	wg.Wait()
	paths = append(paths, self)
	return paths, errors.Join(append(errs, runErr)...)
}

func fetchTo(ctx context.Context, hc *http.Client, url, path string, timeout time.Duration) error {
	return get(ctx, hc, url, timeout, func(body io.Reader) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// get GETs url within timeout and hands a 200 answer's body to use.
func get(ctx context.Context, hc *http.Client, url string, timeout time.Duration, use func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return use(resp.Body)
}
