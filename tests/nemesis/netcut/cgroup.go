package netcut

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// nftCgroupRoot is where nft looks for the path in a "socket cgroupv2"
// match: it stats /sys/fs/cgroup/<path> when the rule is loaded, wherever
// cgroup2 is mounted (nftables' SYSFS_CGROUPSV2_PATH).
const nftCgroupRoot = "/sys/fs/cgroup"

// cgroup2Mount is the cgroup v2 file system as the mount table shows it.
type cgroup2Mount struct {
	// dir is the mount point, like /sys/fs/cgroup/unified.
	dir string
	// root is the cgroup the mount shows at dir, "/" for the hierarchy's
	// root.
	root string
}

// findCgroup2 reads a mount table in the format of /proc/self/mountinfo
// and returns its first cgroup2 mount.
func findCgroup2(mountinfo io.Reader) (cgroup2Mount, error) {
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		return cgroup2Mount{dir: unescapeMount(fields[4]), root: unescapeMount(fields[3])}, nil
	}
	if err := sc.Err(); err != nil {
		return cgroup2Mount{}, fmt.Errorf("netcut: reading the mount table: %w", err)
	}
	return cgroup2Mount{}, errors.New("netcut: no cgroup2 file system is mounted (none in /proc/self/mountinfo)")
}

// unescapeMount undoes the octal escapes (\040 for a space) of a path in
// the mount table.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nftPath is the path nft wants for the group at dir: relative to
// nftCgroupRoot.
func nftPath(dir string) (string, error) {
	rel, err := filepath.Rel(nftCgroupRoot, dir)
	if err != nil {
		return "", fmt.Errorf("netcut: cgroup %s: %w", dir, err)
	}
	return rel, nil
}

// level is the depth in the v2 hierarchy of the group at dir under the
// mount m: 1 for a child of the hierarchy's root. This is the "level" of
// an nftables socket cgroupv2 match, which compares the socket's ancestor
// at that depth.
func (m cgroup2Mount) level(dir string) (int, error) {
	rel, err := filepath.Rel(m.dir, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return 0, fmt.Errorf("netcut: %s is not a cgroup below %s", dir, m.dir)
	}
	return depth(m.root) + depth(rel), nil
}

// depth counts the elements of a slash-separated path, ignoring empty
// ones: 0 for "/" and "", 2 for "/a/b".
func depth(p string) int {
	n := 0
	for _, e := range strings.Split(p, "/") {
		if e != "" && e != "." {
			n++
		}
	}
	return n
}

// procs reads the pids in the cgroup.procs file of the group at dir.
func procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("netcut: %w", err)
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		pid, err := strconv.Atoi(string(f))
		if err != nil {
			return nil, fmt.Errorf("netcut: %s/cgroup.procs: %q is not a pid", dir, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// moveProc moves pid (the whole process) into the group at dir. A process
// that has exited is no error: there is nothing left to move.
func moveProc(dir string, pid int) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("netcut: %w", err)
	}
	_, werr := f.WriteString(strconv.Itoa(pid))
	cerr := f.Close()
	if errors.Is(werr, syscall.ESRCH) {
		return nil
	}
	if werr != nil {
		return fmt.Errorf("netcut: moving pid %d to %s: %w", pid, dir, werr)
	}
	return cerr
}
