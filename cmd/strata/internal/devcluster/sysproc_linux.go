package devcluster

import "syscall"

// sysProcAttr puts each child in its own process group, so a Ctrl-C in the
// terminal reaches strata dev alone, which then stops the children in
// order with one SIGTERM each (a second signal would make a service exit at
// once, skipping its graceful shutdown). Pdeathsig sends SIGTERM to a child
// when strata dev itself dies, even by SIGKILL, so no orphan keeps the
// cluster's ports. (Pdeathsig follows the thread that started the child;
// Go does not end threads unless a goroutine locked to one exits, which
// this package never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
