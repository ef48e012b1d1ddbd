//go:build !unix

package devcluster

import "syscall"

// sysProcAttr leaves the children in strata dev's console group.
func sysProcAttr() *syscall.SysProcAttr { return nil }
