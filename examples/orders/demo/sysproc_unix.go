//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts each child in its own process group; see the Linux
// version. Without Pdeathsig outside Linux, the children of a demo killed
// by SIGKILL keep running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
