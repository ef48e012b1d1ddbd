package server

import (
	"context"
	"math/bits"
	"net/http"
	"sync"
)

// Read buffers of Fetch and Replicate answers come from pools, so a busy
// node does not allocate (and collect) up to a partition's max bytes per
// partition per answer. A Connect handler's answer is marshaled after the
// handler returns, so the buffers cannot go back to the pool there: each
// request carries a readBufs in its context, the handler takes buffers
// from it, and withReadBufs returns them all once the whole HTTP exchange
// is over, when the answer has been marshaled (copied) and written and no
// message refers to them any more.

// Buffers are pooled in power-of-two sizes from minPooledRead to
// maxPooledRead; a read larger than that gets a buffer of its own.
const (
	minPooledShift = 16 // 64 KiB
	maxPooledShift = 24 // 16 MiB
)

var readPools [maxPooledShift - minPooledShift + 1]sync.Pool

// poolIndex returns the pool of buffers of at least n bytes, or -1 when n
// is larger than the largest pooled size.
func poolIndex(n int) int {
	shift := minPooledShift
	if n > 1<<minPooledShift {
		shift = bits.Len(uint(n - 1))
	}
	if shift > maxPooledShift {
		return -1
	}
	return shift - minPooledShift
}

// readBufs are the pooled buffers one request has taken. Safe for
// concurrent use.
type readBufs struct {
	mu   sync.Mutex
	bufs []*[]byte
	idx  []int
	done bool
}

type readBufsKey struct{}

// withReadBufs gives every request to h a readBufs and returns its buffers
// to their pools after h has answered.
func withReadBufs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rb := &readBufs{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), readBufsKey{}, rb)))
		rb.release()
	})
}

// readBuf returns an empty buffer with room for n bytes for a read answered
// in ctx's request, or nil (the read allocates) when the request carries
// no readBufs or n is too large to pool.
func readBuf(ctx context.Context, n int) []byte {
	rb, _ := ctx.Value(readBufsKey{}).(*readBufs)
	if rb == nil {
		return nil
	}
	i := poolIndex(n)
	if i < 0 {
		return nil
	}
	bp, _ := readPools[i].Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 1<<(i+minPooledShift))
		bp = &b
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.done { // a read that outlived its request
		readPools[i].Put(bp)
		return nil
	}
	rb.bufs, rb.idx = append(rb.bufs, bp), append(rb.idx, i)
	return (*bp)[:0]
}

// release returns the request's buffers to their pools.
func (rb *readBufs) release() {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	rb.done = true
	for k, bp := range rb.bufs {
		readPools[rb.idx[k]].Put(bp)
	}
	rb.bufs, rb.idx = nil, nil
}
