// Package pidblock hands out producer ids one at a time from blocks that
// the controller allocates (AllocateProducerIds). Blocks never overlap
// across the cluster, so ids handed out by any number of services
// (gateways for idempotent producers, coordinators for transactional
// ones) are distinct; an id is never handed out twice by one Allocator.
//
// Ids left in a block when the process stops are lost, which is harmless:
// the id space is int64.
package pidblock

import (
	"context"
	"fmt"
)

// FetchFunc obtains a new block: count ids from first on.
type FetchFunc func(ctx context.Context) (first int64, count int32, err error)

// Allocator hands out ids from the current block and fetches the next
// block when it is used up. The zero value is not usable; use New. Safe
// for concurrent use: one fetch runs at a time, and callers waiting for
// it give up when their context ends.
type Allocator struct {
	fetch FetchFunc
	sem   chan struct{} // holds the right to touch next and end
	next  int64         // next id to hand out
	end   int64         // one past the last id of the current block
}

// New returns an Allocator that fetches blocks with fetch. No block is
// fetched until the first Next.
func New(fetch FetchFunc) *Allocator {
	return &Allocator{fetch: fetch, sem: make(chan struct{}, 1)}
}

// Next returns an id no caller of this Allocator has received before. It
// fails with the fetch's error when a new block is needed and cannot be
// obtained, or with ctx's error while it waits for another caller's
// fetch.
func (a *Allocator) Next(ctx context.Context) (int64, error) {
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-a.sem }()
	if a.next >= a.end {
		first, count, err := a.fetch(ctx)
		if err != nil {
			return 0, err
		}
		if count < 1 || first < 0 {
			return 0, fmt.Errorf("pidblock: the controller granted an empty or negative block (first %d, count %d)", first, count)
		}
		a.next, a.end = first, first+int64(count)
	}
	id := a.next
	a.next++
	return id, nil
}
