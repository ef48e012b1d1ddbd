// Package netcut cuts the network between real processes on loopback, one
// way and by port, for fault tests: "packets that group A sends to ports P
// are dropped". It is test infrastructure and knows nothing of the
// services it cuts.
//
// # How it works
//
// Each process to cut runs in a cgroup v2 group of its own, a directory
// under a parent made for one Net (<cgroup2 mount>/strata-nemesis-<pid>-<n>/<name>).
// A process is started in its group (Group.Setup or Group.SysProcAttr, so
// every socket it opens is born there) or moved into it (Group.Add).
//
// A cut is an nftables rule on the output hook, in a table of the Net's
// own (inet strata_nemesis_<pid>_<n>), so nothing else on the machine is
// touched:
//
//	socket cgroupv2 level L "<group path>" tcp dport { P... } drop
//
// The kernel matches the cgroup of the socket that sends the packet. nft
// resolves the path to the group's id when the rule is loaded, relative to
// /sys/fs/cgroup whatever the cgroup2 mount point is (on a host with the v2
// hierarchy beside the v1 controllers, at /sys/fs/cgroup/unified, the path
// starts "unified/"), and L is the group's depth in the v2 hierarchy. Both
// are found from /proc/self/mountinfo, never assumed. A cgroup namespace
// whose root is not the hierarchy's root would make the depth wrong; the
// package assumes there is none.
//
// # What a cut means, exactly
//
// Cut(ctx, a, P...) makes these true until it is healed:
//
//   - Every TCP packet that a socket of group A sends to a port in P, on any
//     address and over IPv4 or IPv6, is dropped. A new connection from A to
//     P never completes: its SYNs are lost and connect times out.
//   - Every TCP connection that a process of A holds to a port in P when the
//     cut is made is destroyed (ss -K): its owner in A sees ECONNABORTED.
//     This covers sockets a process opened before Group.Add moved it (a
//     socket keeps the cgroup it was created in, so the rule alone would
//     let them flow) as well as those born in the group. The other end
//     learns of it when the reset reaches it, or with a reset when it next
//     sends. Cuts are made at an instant: a process that joins a group
//     later brings its old connections with it uncut.
//   - Nothing else changes. In particular the cut is one way: replies that
//     A sends on connections B opened to A go from A's port to B's
//     ephemeral port, which a rule on P does not match, so B can still
//     reach A and be answered. Cut both ways with Partition, or with two
//     Cuts.
//
// CutAnswers(ctx, a, P...) is the other way round, a rule on the input
// hook that matches the socket a packet arrives at, and only segments
// that carry data (@ih,0,8 loads the first byte of the TCP payload, and
// fails on a segment without one):
//
//	tcp sport { P... } @ih,0,8 >= 0 socket cgroupv2 level L "<group path>" drop
//
// It makes these true until it is healed:
//
//   - Every TCP segment carrying data sent from a port in P that arrives
//     at a socket of group A is dropped: the answers of the servers on P
//     on the connections A's processes opened to them, new ones included.
//   - Segments without data arrive: handshakes complete, and the servers'
//     acknowledgements keep what A sends flowing, so a server receives and
//     acts on every request whose answer is lost. No connection is
//     destroyed; once healed, retransmission delivers the answers late
//     and the connections go on. (Dropping every packet instead would
//     stall A's sending after its first retransmission timeout, a few
//     hundred milliseconds: the requests would land only after the heal.)
//   - Nothing else changes: the servers' answers to other groups flow.
//
// Only TCP is cut, and only in the network namespace of the caller (every
// process of a loopback cluster shares it).
//
// # Requirements
//
// Root, nft (Debian's nftables package), ss (iproute2), a kernel with
// nftables socket cgroupv2 matching (5.13+) and sock_diag destroy
// (CONFIG_INET_DIAG_DESTROY), cgroup2 mounted, and Linux 5.7+ for starting
// a process in its group. New reports the first one missing in one line;
// a test should fail on it, not skip.
package netcut
