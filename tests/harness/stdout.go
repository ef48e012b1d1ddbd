package harness

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// stdoutReader reads a child's stdout pipe so that bytes leave the pipe
// only while a given lock is held. A reader that first read and then
// took the lock would leave a window where bytes are neither in the pipe
// nor in Lines; with this one, "the pipe is empty" checked under the
// lock means "Lines holds everything written", which is how Stop knows
// it has every line a paused process printed.
type stdoutReader struct {
	f   *os.File
	rc  syscall.RawConn
	buf []byte
}

func newStdoutReader(f *os.File) (*stdoutReader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &stdoutReader{f: f, rc: rc, buf: make([]byte, 64<<10)}, nil
}

// read waits until the pipe is readable, then reads once with mu held
// and passes what it read to consume (still under mu). It returns false
// at end of file or on an error.
func (r *stdoutReader) read(mu *sync.Mutex, consume func([]byte)) bool {
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		mu.Lock()
		defer mu.Unlock()
		for {
			n, rerr = syscall.Read(int(fd), r.buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			return false // nothing yet: wait for the poller
		}
		if n > 0 {
			consume(r.buf[:n])
		}
		return true
	})
	return err == nil && rerr == nil && n > 0
}

// unread returns how many bytes wait in the pipe; call it with the lock
// given to read held. It fails with errUnobservable where the platform
// cannot tell.
func (r *stdoutReader) unread() (int, error) {
	var n int
	var ierr error
	if err := r.rc.Control(func(fd uintptr) { n, ierr = pipeUnread(fd) }); err != nil {
		return 0, err
	}
	return n, ierr
}

func (r *stdoutReader) close() { r.f.Close() }

// errUnobservable is returned where this platform cannot observe a
// process's stop state or a pipe's fill level.
var errUnobservable = errors.New("harness: not observable on this platform")
