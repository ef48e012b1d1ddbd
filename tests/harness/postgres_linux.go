package harness

import "syscall"

// postgresSysProcAttr runs the server as cred's user, in a process group
// of its own (a Ctrl-C at the terminal reaches the test binary alone), and
// has the kernel send it SIGQUIT, an immediate shutdown, should the test
// binary die without stopping it (see spawnThread).
func postgresSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
}
