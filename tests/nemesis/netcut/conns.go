package netcut

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// conn is one TCP socket as /proc/net/tcp{,6} lists it.
type conn struct {
	local, remote netip.AddrPort
	inode         uint64
	listening     bool
}

func (c conn) String() string { return c.local.String() + "->" + c.remote.String() }

// connsTo lists the TCP connections that the processes pids hold (as
// open file descriptors) to a port in ports. Listening sockets and
// processes that have exited are left out.
func connsTo(pids, ports []int) ([]conn, error) {
	inodes := map[uint64]bool{}
	tables := map[string]int{} // network namespace -> a pid in it
	for _, pid := range pids {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if errors.Is(err, fs.ErrNotExist) {
			continue // exited
		}
		if err != nil {
			return nil, fmt.Errorf("netcut: %w", err)
		}
		if err := socketInodes(pid, inodes); err != nil {
			return nil, err
		}
		tables[ns] = pid
	}
	var out []conn
	for _, pid := range tables {
		for _, name := range []string{"tcp", "tcp6"} {
			f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue // exited, or no IPv6
			}
			if err != nil {
				return nil, fmt.Errorf("netcut: %w", err)
			}
			all, err := parseProcNetTCP(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("netcut: /proc/%d/net/%s: %w", pid, name, err)
			}
			for _, c := range all {
				if !c.listening && inodes[c.inode] && slices.Contains(ports, int(c.remote.Port())) {
					out = append(out, c)
				}
			}
		}
	}
	return out, nil
}

// socketInodes adds the inode numbers of pid's open sockets to into.
func socketInodes(pid int, into map[uint64]bool) error {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // exited
	}
	if err != nil {
		return fmt.Errorf("netcut: %w", err)
	}
	for _, e := range ents {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile, or the process exited
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				into[n] = true
			}
		}
	}
	return nil
}

// tcpListen is the state column of a listening socket in /proc/net/tcp
// (TCP_LISTEN).
const tcpListen = 0x0A

// parseProcNetTCP reads a table in the format of /proc/net/tcp or
// /proc/net/tcp6.
func parseProcNetTCP(r io.Reader) ([]conn, error) {
	sc := bufio.NewScanner(r)
	var out []conn
	for first := true; sc.Scan(); first = false {
		if first {
			continue // the header
		}
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return nil, fmt.Errorf("short line %q", sc.Text())
		}
		local, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, err
		}
		remote, err := parseHexAddrPort(f[2])
		if err != nil {
			return nil, err
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("state %q: %w", f[3], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q: %w", f[9], err)
		}
		out = append(out, conn{local: local, remote: remote, inode: inode, listening: st == tcpListen})
	}
	return out, sc.Err()
}

// parseHexAddrPort parses an address of /proc/net/tcp{,6}: ADDR:PORT, both
// in hex, the address as 32-bit words each printed as a number in host
// byte order.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", s, err)
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// killConns destroys the TCP connections that the processes pids hold to
// a port in ports, with ss -K, and checks that they are gone. It returns
// what it destroyed.
func killConns(ctx context.Context, pids, ports []int) ([]conn, error) {
	conns, err := connsTo(pids, ports)
	if err != nil || len(conns) == 0 {
		return nil, err
	}
	var filter []string
	for _, c := range conns {
		filter = append(filter, fmt.Sprintf("( src %s and dst %s )", c.local, c.remote))
	}
	args := []string{"-K", "-t", "-n", "state", "connected", strings.Join(filter, " or ")}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ss", args...)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("netcut: ss -K: %v: %s", err, firstLine(stderr.String()))
	}
	// Destroyed sockets leave the tables at once; one still there means
	// the kernel cannot destroy sockets.
	left, err := connsTo(pids, ports)
	if err != nil {
		return nil, err
	}
	for _, l := range left {
		for _, c := range conns {
			if l.inode == c.inode {
				return nil, fmt.Errorf("netcut: ss -K left connection %s open (a kernel without CONFIG_INET_DIAG_DESTROY?)", l)
			}
		}
	}
	return conns, nil
}

// firstLine is the first non-empty line of s, for one-line errors.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
