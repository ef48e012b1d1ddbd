package serve

import "net/http"

// An HTTP/2 server runs each request in a goroutine of its own, which
// starts with a small stack. A Connect handler (interceptors, protobuf,
// the service and the storage log below it) needs far more, so the
// runtime grows the stack several times on the way down, each time
// copying it and walking every frame on it to adjust pointers. On the
// storage nodes at half load, stack growth was 4.5 to 6.6 % of their
// CPU, most of it under http2serverConn.runHandler (docs/performance.md,
// "The tail at half load"). Growing the stack once, at the top of the
// request where it holds two frames, costs one small copy instead: 2.7
// to 4.1 % after, the rest in the HTTP/2 client's request goroutines.
// CockroachDB grows its RPC handlers' stacks the same way.

// grownStackBytes is the stack frame that growStack takes: the runtime
// doubles a stack until the frame fits, so the request's stack is 32 KiB
// from its start, which the handlers on the data path do not outgrow.
const grownStackBytes = 16 << 10

// withGrownStack runs h on a stack grown once, up front.
func withGrownStack(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack(0)
		h.ServeHTTP(w, r)
	})
}

// growStack takes a large stack frame and returns, leaving the
// goroutine's stack grown. It reads and writes the frame through an
// index the compiler cannot know, so the frame is not optimized away.
//
//go:noinline
func growStack(i byte) byte {
	var buf [grownStackBytes]byte
	buf[i] = i
	return buf[grownStackBytes-1-int(i)]
}
