package netcut

import (
	"fmt"
	"os/exec"
	"syscall"
)

// Group is a cgroup v2 group that processes are put in to be cut as one:
// usually one process, a node of the cluster under test. It lives until
// its Net is closed. Methods are safe for concurrent use.
type Group struct {
	net   *Net
	name  string
	dir   string // absolute path of the group's directory
	path  string // the path nft wants (see nftPath)
	level int    // depth in the v2 hierarchy (see cgroup2Mount.level)
	fd    int    // the directory, open for CLONE_INTO_CGROUP; closed by Net.Close
}

// Name is the name the group was made with.
func (g *Group) Name() string { return g.name }

// Dir is the group's directory in the cgroup2 file system.
func (g *Group) Dir() string { return g.dir }

// SysProcAttr returns attributes that start a process directly in the
// group (clone3 with CLONE_INTO_CGROUP, Linux 5.7+), so that every socket
// it opens is born there. It is valid until the Net is closed: it holds
// the group's open directory.
func (g *Group) SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.fd}
}

// Setup makes cmd start in the group, keeping whatever else its
// SysProcAttr sets. Its signature fits harness.StartWith, which calls it
// for the first run and every restart. Like SysProcAttr, it is valid
// until the Net is closed.
func (g *Group) Setup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = g.fd
}

// Add moves the running process pid, all its threads, into the group.
// Children it starts afterwards are born in the group; children it
// started before stay where they are. Sockets it opened before keep the
// cgroup they were created in, which a Cut handles by destroying those
// connections (see the package doc). Adding a process that has exited is
// no error.
func (g *Group) Add(pid int) error {
	g.net.mu.Lock()
	defer g.net.mu.Unlock()
	if g.net.closed {
		return fmt.Errorf("netcut: add pid %d to %s: closed", pid, g.name)
	}
	return moveProc(g.dir, pid)
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) { return procs(g.dir) }

func (g *Group) String() string { return g.name }
