package objstore

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// ErrInjected is the error a Faulty bucket returns for an injected fault.
var ErrInjected = errors.New("objstore: injected fault")

// Op names a Bucket method, for fault injection.
type Op string

// The operations a Faulty bucket can fail or delay.
const (
	OpUpload   Op = "upload"
	OpGetRange Op = "getrange"
	OpGet      Op = "get"
	OpPutIf    Op = "putif"
	OpDelete   Op = "delete"
	OpList     Op = "list"
	OpExists   Op = "exists"
)

// Fault is one injected failure or delay. A Fault whose Key is set applies
// only to calls whose key (or prefix) satisfies it.
type Fault struct {
	Op    Op                // which method
	Key   func(string) bool // nil matches every key
	Err   error             // returned instead of calling through; nil with Delay only delays
	Delay time.Duration     // slept before the call (or the error)
	Count int               // how many calls it applies to; 0 means every call
	fired int
}

// Faulty wraps a Bucket and injects faults, for tests (in the manner of
// pebble's errorfs and franz-go's kfake faults). Safe for concurrent use.
type Faulty struct {
	Bucket
	mu     sync.Mutex
	faults []*Fault
	calls  map[Op]int
}

// NewFaulty wraps b.
func NewFaulty(b Bucket) *Faulty { return &Faulty{Bucket: b, calls: map[Op]int{}} }

// AddFault adds f; faults apply in the order added, first match wins.
func (f *Faulty) AddFault(fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &fault)
}

// Clear removes every fault.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Calls reports how many calls of op were made.
func (f *Faulty) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *Faulty) inject(ctx context.Context, op Op, key string) error {
	f.mu.Lock()
	f.calls[op]++
	var hit *Fault
	for _, x := range f.faults {
		if x.Op == op && (x.Key == nil || x.Key(key)) && (x.Count == 0 || x.fired < x.Count) {
			x.fired++
			hit = x
			break
		}
	}
	f.mu.Unlock()
	if hit == nil {
		return nil
	}
	if hit.Delay > 0 {
		t := time.NewTimer(hit.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return hit.Err
}

func (f *Faulty) Upload(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := f.inject(ctx, OpUpload, key); err != nil {
		return err
	}
	return f.Bucket.Upload(ctx, key, r, size)
}

func (f *Faulty) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := f.inject(ctx, OpGetRange, key); err != nil {
		return nil, err
	}
	return f.Bucket.GetRange(ctx, key, off, length)
}

func (f *Faulty) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := f.inject(ctx, OpGet, key); err != nil {
		return nil, "", err
	}
	return f.Bucket.Get(ctx, key)
}

func (f *Faulty) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if err := f.inject(ctx, OpPutIf, key); err != nil {
		return "", err
	}
	return f.Bucket.PutIf(ctx, key, data, ifMatch)
}

func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.inject(ctx, OpDelete, key); err != nil {
		return err
	}
	return f.Bucket.Delete(ctx, key)
}

func (f *Faulty) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := f.inject(ctx, OpList, prefix); err != nil {
		return err
	}
	return f.Bucket.List(ctx, prefix, fn)
}

func (f *Faulty) Exists(ctx context.Context, key string) (bool, error) {
	if err := f.inject(ctx, OpExists, key); err != nil {
		return false, err
	}
	return f.Bucket.Exists(ctx, key)
}
