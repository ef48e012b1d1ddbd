package netcut

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Net is one test's groups and cuts: a parent cgroup with a group per
// process, and an nftables table with a rule per cut. Close removes all of
// it. Methods are safe for concurrent use; cuts are made and healed one at
// a time.
type Net struct {
	mount  cgroup2Mount
	parent string // the groups' parent directory
	table  string // the nftables table (family inet)

	mu     sync.Mutex
	groups []*Group
	cuts   []*cut // active, in the order made
	lastID CutID
	closed bool
}

// CutID names a cut made by Cut or Partition, for Heal. IDs count up from
// 1 within a Net.
type CutID int

// cut is one Cut or Partition: the rules it loaded.
type cut struct {
	id     CutID
	what   string // "" for a Cut, "partition a | b c" for a Partition
	rules  []rule
	killed int // connections destroyed when the cut was made
}

// rule is one nftables rule: packets a group sends to ports are dropped
// or, for an answers rule (CutAnswers), packets a group receives from
// ports.
type rule struct {
	from    *Group // the group whose sockets the rule matches
	ports   []int  // sorted, no duplicates
	answers bool   // match packets from ports arriving at from's sockets
	handle  int    // the rule's handle in its chain, to delete it
}

func (r rule) String() string {
	if r.answers {
		return r.from.name + " <- " + joinPorts(r.ports, ",")
	}
	return r.from.name + " -> " + joinPorts(r.ports, ",")
}

// chain is the chain of the Net's table that holds r.
func (r rule) chain() string {
	if r.answers {
		return inputChain
	}
	return chain
}

// nft is r as the body of an nft add rule.
func (r rule) nft() string {
	if r.answers {
		// @ih,0,8 loads the first byte of the TCP payload: a segment
		// without data (the handshake, a bare acknowledgement, a FIN)
		// has none, the load fails and the rule does not match it.
		return fmt.Sprintf("tcp sport { %s } @ih,0,8 >= 0 socket cgroupv2 level %d %q drop", joinPorts(r.ports, ", "), r.from.level, r.from.path)
	}
	return fmt.Sprintf("socket cgroupv2 level %d %q tcp dport { %s } drop", r.from.level, r.from.path, joinPorts(r.ports, ", "))
}

// instances tells apart the Nets of one process, in group and table names.
var instances atomic.Int64

// chain is the output-hook chain of a Net's table that holds the cuts;
// inputChain, on the input hook, holds CutAnswers's rules.
const (
	chain      = "output"
	inputChain = "input"
)

// closeTimeout bounds Close: the nft call and moving processes out of
// the groups, which take milliseconds on an idle machine.
const closeTimeout = 30 * time.Second

// New checks that the machine can cut (root, nft, ss, a cgroup2 mount),
// then makes the Net's parent group and nftables table. Its error is one
// line naming what is missing. Call Close when done.
func New(ctx context.Context) (*Net, error) {
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("netcut: cutting the network needs root (running as uid %d)", euid)
	}
	for _, tool := range []struct{ bin, pkg string }{{"nft", "nftables"}, {"ss", "iproute2"}} {
		if _, err := exec.LookPath(tool.bin); err != nil {
			return nil, fmt.Errorf("netcut: %s not found in PATH: install %s (apt-get install -y %s)", tool.bin, tool.pkg, tool.pkg)
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("netcut: %w", err)
	}
	m, err := findCgroup2(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%d-%d", os.Getpid(), instances.Add(1))
	n := &Net{
		mount:  m,
		parent: filepath.Join(m.dir, "strata-nemesis-"+id),
		table:  "strata_nemesis_" + strings.ReplaceAll(id, "-", "_"),
	}
	if err := os.Mkdir(n.parent, 0o755); err != nil {
		return nil, fmt.Errorf("netcut: making the parent cgroup: %w", err)
	}
	script := fmt.Sprintf("add table inet %[1]s\n"+
		"add chain inet %[1]s %[2]s { type filter hook output priority filter; policy accept; }\n"+
		"add chain inet %[1]s %[3]s { type filter hook input priority filter; policy accept; }\n", n.table, chain, inputChain)
	if _, err := runNFT(ctx, script); err != nil {
		os.Remove(n.parent)
		return nil, err
	}
	return n, nil
}

// groupName is what a group name may be: it becomes a directory name and
// part of a quoted nft string.
var groupName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Group makes the group name (letters, digits, '_', '.', '-'; unique in
// the Net), empty.
func (n *Net) Group(name string) (*Group, error) {
	if !groupName.MatchString(name) {
		return nil, fmt.Errorf("netcut: group name %q: use letters, digits, '_', '.' and '-'", name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("netcut: group %s: closed", name)
	}
	if slices.ContainsFunc(n.groups, func(g *Group) bool { return g.name == name }) {
		return nil, fmt.Errorf("netcut: group %s exists", name)
	}
	dir := filepath.Join(n.parent, name)
	path, err := nftPath(dir)
	if err != nil {
		return nil, err
	}
	level, err := n.mount.level(dir)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("netcut: %w", err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("netcut: open %s: %w", dir, err)
	}
	g := &Group{net: n, name: name, dir: dir, path: path, level: level, fd: fd}
	n.groups = append(n.groups, g)
	return g, nil
}

// Cut drops what group from sends to ports (on any address) and destroys
// the connections its processes hold to them, as the package doc
// describes; nothing else changes. It returns once both are in effect. On
// error nothing was cut.
func (n *Net) Cut(ctx context.Context, from *Group, ports ...int) (CutID, error) {
	if err := n.check(from); err != nil {
		return 0, err
	}
	ps, err := portSet(ports)
	if err != nil {
		return 0, err
	}
	return n.addCut(ctx, "", []rule{{from: from, ports: ps}})
}

// CutAnswers drops every TCP segment carrying data that arrives at a
// socket of group to from one of ports (on any address, IPv4 or IPv6):
// the answers of the servers listening on ports on the connections to's
// processes opened to them. Segments without data still arrive, so
// connections open and stay open, and the servers' acknowledgements keep
// what to sends flowing: a server receives and acts on every request
// whose answer is lost. Unlike Cut it destroys no connection; once
// healed, TCP retransmits the answers and the connections go on, the
// answers late. What a server sends to sockets of other groups still
// flows. It returns once the rule is in effect. On error nothing was cut.
func (n *Net) CutAnswers(ctx context.Context, to *Group, ports ...int) (CutID, error) {
	if err := n.check(to); err != nil {
		return 0, err
	}
	ps, err := portSet(ports)
	if err != nil {
		return 0, err
	}
	return n.addCut(ctx, "", []rule{{from: to, ports: ps, answers: true}})
}

// Partition splits groups a from groups b both ways: each group of a is
// cut from the ports portsOf gives for the groups of b, and each group of
// b from those of a's. Groups on the same side still reach each other. To
// isolate one node, pass it alone as a and the others as b; for a one-way
// cut (a leader that its clients reach but that cannot reach the
// controller), use Cut. It returns one CutID for the whole split. On
// error nothing was cut.
func (n *Net) Partition(ctx context.Context, a, b []*Group, portsOf func(*Group) []int) (CutID, error) {
	if len(a) == 0 || len(b) == 0 {
		return 0, errors.New("netcut: partition: both sides need a group")
	}
	for _, g := range append(slices.Clone(a), b...) {
		if err := n.check(g); err != nil {
			return 0, err
		}
	}
	for _, g := range a {
		if slices.Contains(b, g) {
			return 0, fmt.Errorf("netcut: partition: %s is on both sides", g.name)
		}
	}
	var rules []rule
	for _, side := range [][2][]*Group{{a, b}, {b, a}} {
		var ports []int
		for _, g := range side[1] {
			ports = append(ports, portsOf(g)...)
		}
		if len(ports) == 0 {
			continue
		}
		ps, err := portSet(ports)
		if err != nil {
			return 0, err
		}
		for _, g := range side[0] {
			rules = append(rules, rule{from: g, ports: ps})
		}
	}
	if len(rules) == 0 {
		return 0, errors.New("netcut: partition: portsOf gave no ports")
	}
	return n.addCut(ctx, "partition "+names(a)+" | "+names(b), rules)
}

// Heal removes cut id: packets flow again (connections it destroyed stay
// closed; their owners open new ones).
func (n *Net) Heal(ctx context.Context, id CutID) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.cuts, func(c *cut) bool { return c.id == id })
	if i < 0 {
		return fmt.Errorf("netcut: heal: no cut %d", id)
	}
	if err := n.deleteRules(ctx, n.cuts[i].rules); err != nil {
		return err
	}
	n.cuts = slices.Delete(n.cuts, i, i+1)
	return nil
}

// HealAll removes every cut.
func (n *Net) HealAll(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var rules []rule
	for _, c := range n.cuts {
		rules = append(rules, c.rules...)
	}
	if err := n.deleteRules(ctx, rules); err != nil {
		return err
	}
	n.cuts = nil
	return nil
}

// String lists the active cuts, for logs: "cut 1: a -> 9001,9002 (2
// connections destroyed); cut 2 (partition a | b c): ...; cut 3: a <-
// 9003" (answers from 9003 to a dropped).
func (n *Net) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.cuts) == 0 {
		return "no cuts"
	}
	var parts []string
	for _, c := range n.cuts {
		s := "cut " + strconv.Itoa(int(c.id))
		if c.what != "" {
			s += " (" + c.what + ")"
		}
		var rs []string
		for _, r := range c.rules {
			rs = append(rs, r.String())
		}
		s += ": " + strings.Join(rs, "; ")
		switch {
		case c.killed == 1:
			s += " (1 connection destroyed)"
		case c.killed > 1:
			s += fmt.Sprintf(" (%d connections destroyed)", c.killed)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// Close removes the table (so every cut), moves the processes still in
// the groups back to the root group, and removes the groups and their
// parent. The Net's groups are unusable afterwards, their SysProcAttr
// included. Closing again is a no-op that returns nil.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	if _, err := runNFT(ctx, fmt.Sprintf("delete table inet %s\n", n.table)); err != nil {
		errs = append(errs, err)
	}
	n.cuts = nil
	for _, g := range n.groups {
		syscall.Close(g.fd)
		errs = append(errs, n.removeGroup(ctx, g.dir))
	}
	if err := os.Remove(n.parent); err != nil {
		errs = append(errs, fmt.Errorf("netcut: %w", err))
	}
	return errors.Join(errs...)
}

// removeGroup empties the group at dir into the root group and removes
// it. Emptying is repeated while rmdir finds the group busy: a process
// that forks as it is moved can leave a child behind.
func (n *Net) removeGroup(ctx context.Context, dir string) error {
	for {
		pids, err := procs(dir)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			if err := moveProc(n.mount.dir, pid); err != nil {
				return err
			}
		}
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("netcut: removing %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netcut: removing %s: still busy: %w", dir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// check reports an error unless g is a group of n.
func (n *Net) check(g *Group) error {
	if g == nil || g.net != n {
		return errors.New("netcut: the group belongs to another Net")
	}
	return nil
}

// addCut loads rules in one nft transaction, then destroys the
// connections they must stop. On error it removes the rules again.
func (n *Net) addCut(ctx context.Context, what string, rules []rule) (CutID, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return 0, errors.New("netcut: cut: closed")
	}
	id := n.lastID + 1
	var script strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&script, "add rule inet %s %s %s comment %q\n", n.table, r.chain(), r.nft(), fmt.Sprintf("cut %d: %s", id, r))
	}
	out, err := runNFT(ctx, script.String(), "--echo", "--handle")
	if err != nil {
		return 0, err
	}
	handles, err := parseHandles(out)
	if err == nil && len(handles) != len(rules) {
		err = fmt.Errorf("netcut: nft echoed %d rule handles for %d rules", len(handles), len(rules))
	}
	if err != nil {
		// The rules are in but cannot be told apart; drop the lot rather
		// than leave a cut nobody can heal.
		return 0, errors.Join(err, n.flushLocked(ctx))
	}
	killed := 0
	for i := range rules {
		rules[i].handle = handles[i]
		if rules[i].answers {
			continue // the connections stay: only their answers are lost
		}
		pids, err := rules[i].from.Pids()
		if err == nil {
			var conns []conn
			conns, err = killConns(ctx, pids, rules[i].ports)
			killed += len(conns)
		}
		if err != nil {
			return 0, errors.Join(err, n.deleteRules(ctx, rules))
		}
	}
	n.lastID = id
	n.cuts = append(n.cuts, &cut{id: id, what: what, rules: rules, killed: killed})
	return id, nil
}

// flushLocked removes every rule of the table, and so every cut.
func (n *Net) flushLocked(ctx context.Context) error {
	n.cuts = nil
	_, err := runNFT(ctx, fmt.Sprintf("flush chain inet %[1]s %[2]s\nflush chain inet %[1]s %[3]s\n", n.table, chain, inputChain))
	return err
}

// deleteRules removes rules in one nft transaction.
func (n *Net) deleteRules(ctx context.Context, rules []rule) error {
	if len(rules) == 0 {
		return nil
	}
	var script strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&script, "delete rule inet %s %s handle %d\n", n.table, r.chain(), r.handle)
	}
	_, err := runNFT(ctx, script.String())
	return err
}

// runNFT runs an nft script (one atomic transaction) with extra flags
// before it and returns what nft printed.
func runNFT(ctx context.Context, script string, flags ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nft", append(flags, "-f", "-")...)
	cmd.Stdin = strings.NewReader(script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := firstLine(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("netcut: nft: %s (script: %s)", msg, firstLine(script))
	}
	return stdout.String(), nil
}

// echoedHandle finds the handle in a line nft --echo --handle prints for
// an added rule: "add rule inet T output ... # handle 7".
var echoedHandle = regexp.MustCompile(`^add rule .* # handle (\d+)$`)

// parseHandles returns the handles of the rules nft echoed, in order.
func parseHandles(out string) ([]int, error) {
	var hs []int
	for _, l := range strings.Split(out, "\n") {
		m := echoedHandle.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		h, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("netcut: nft echoed handle %q: %w", m[1], err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// portSet validates ports and returns them sorted without duplicates.
func portSet(ports []int) ([]int, error) {
	if len(ports) == 0 {
		return nil, errors.New("netcut: cut: no ports")
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("netcut: cut: port %d out of range", p)
		}
	}
	ps := slices.Clone(ports)
	slices.Sort(ps)
	return slices.Compact(ps), nil
}

func joinPorts(ports []int, sep string) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, sep)
}

func names(gs []*Group) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = g.name
	}
	return strings.Join(s, " ")
}
