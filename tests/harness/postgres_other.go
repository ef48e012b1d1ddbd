//go:build !linux

package harness

import "syscall"

// postgresSysProcAttr runs the server as cred's user, in a process group
// of its own. Without a parent-death signal here, a server whose test
// binary dies without stopping it keeps running.
func postgresSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
