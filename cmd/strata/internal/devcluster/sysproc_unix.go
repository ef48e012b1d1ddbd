//go:build unix && !linux

package devcluster

import "syscall"

// sysProcAttr puts each child in its own process group; see the Linux
// version. Without Pdeathsig outside Linux, children of a strata dev killed
// by SIGKILL keep running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
