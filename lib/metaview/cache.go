package metaview

import (
	"sync"
	"sync/atomic"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// Cache holds the latest View. The zero value is not usable; use NewCache.
// Safe for concurrent use: Apply is serialized internally, readers never
// block and always get a whole View.
type Cache struct {
	mu        sync.Mutex // serializes Apply
	view      atomic.Pointer[View]
	ready     chan struct{}
	readyOnce sync.Once
}

// NewCache returns an empty cache, not ready until the first snapshot.
func NewCache() *Cache {
	return &Cache{ready: make(chan struct{})}
}

// Load returns the current view, or nil before the first snapshot.
func (c *Cache) Load() *View { return c.view.Load() }

// Ready reports whether a snapshot has been applied.
func (c *Cache) Ready() bool { return c.view.Load() != nil }

// ReadyNotify is closed when the first snapshot has been applied.
func (c *Cache) ReadyNotify() <-chan struct{} { return c.ready }

// Apply applies one message of the WatchMetadata stream (see View.Apply)
// and publishes the result. On error the published view is unchanged.
func (c *Cache) Apply(msg *controllerv1.WatchMetadataResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := c.view.Load().Apply(msg)
	if err != nil {
		return err
	}
	c.view.Store(next)
	c.readyOnce.Do(func() { close(c.ready) })
	return nil
}
