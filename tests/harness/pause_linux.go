package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// threadsStopped reports whether every thread of pid is in the stopped
// state, read from /proc/PID/task/TID/stat. A SIGSTOP is not in effect
// when kill(2) returns: the threads of a multi-threaded process stop one
// by one as each next enters the kernel, and on a busy machine one may
// run, and answer a request, for milliseconds after the signal was sent.
func threadsStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("harness: threads of pid %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, err
		}
		// "TID (COMM) STATE ...": COMM may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("harness: unexpected %s: %q", f, b)
		}
		switch b[i+2] {
		case 'T', 't':
		default:
			return false, nil
		}
	}
	return true, nil
}

// pipeUnread returns the number of bytes waiting in the pipe fd
// (FIONREAD).
func pipeUnread(fd uintptr) (int, error) {
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
