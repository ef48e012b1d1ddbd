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
	moved     atomic.Pointer[chan struct{}] // closed, and replaced, when Apply publishes another view
}

// NewCache returns an empty cache, not ready until the first snapshot.
func NewCache() *Cache {
	c := &Cache{ready: make(chan struct{})}
	moved := make(chan struct{})
	c.moved.Store(&moved)
	return c
}

// Load returns the current view, or nil before the first snapshot.
func (c *Cache) Load() *View { return c.view.Load() }

// Ready reports whether a snapshot has been applied.
func (c *Cache) Ready() bool { return c.view.Load() != nil }

// ReadyNotify is closed when the first snapshot has been applied.
func (c *Cache) ReadyNotify() <-chan struct{} { return c.ready }

// Changed returns a channel closed when Apply next publishes a view other
// than the current one (a snapshot or a delta; not a progress notice or a
// stale delta, which leave the view as it is). Take it before Load, so no
// change between the two goes unseen.
func (c *Cache) Changed() <-chan struct{} { return *c.moved.Load() }

// Apply applies one message of the WatchMetadata stream (see View.Apply)
// and publishes the result. On error the published view is unchanged.
func (c *Cache) Apply(msg *controllerv1.WatchMetadataResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := c.view.Load().Apply(msg)
	if err != nil {
		return err
	}
	if prev := c.view.Swap(next); prev != next {
		moved := make(chan struct{})
		close(*c.moved.Swap(&moved))
	}
	c.readyOnce.Do(func() { close(c.ready) })
	return nil
}
