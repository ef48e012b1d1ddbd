package main

import "syscall"

// sysProcAttr puts each child in its own process group, so a Ctrl-C in the
// terminal reaches the demo alone, which then stops the children in order;
// Pdeathsig sends a child SIGTERM should the demo itself die, even by
// SIGKILL, so nothing it started outlives it. (Pdeathsig follows the
// thread that started the child; Go ends no thread unless a goroutine
// locked to one exits, which this program never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
