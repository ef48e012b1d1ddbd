package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/tests/harness"
	"github.com/strata-mq/strata/tests/nemesis/history"
	"github.com/strata-mq/strata/tests/nemesis/netcut"
)

// A fault is one kind of thing the nemesis does to the bed. inject starts
// it, chosen with rng, and returns what it did in words and how to heal
// it. heal must leave every process running and ready, every cut healed
// and every dependency answering, whatever inject left behind: the next
// fault starts from a healthy bed, and the run's final read needs one.
//
// To add a fault: write its inject function here, give it a kind (one of
// history's Fault* names, or a new one: the checker groups by the text),
// and add it to faults below. Every fault in that list runs at least once
// in the short, fixed schedule that make test runs.
type fault struct {
	name   string // what the schedule and the logs call it
	kind   string
	inject func(ctx context.Context, r *run, rng *rand.Rand) (desc string, heal func(context.Context) error, err error)
}

// faults is every fault the nemesis knows, in the order the short schedule
// runs them.
var faults = []fault{
	{"kill-one", history.FaultKill, killOne},
	{"kill-several", history.FaultKill, killSeveral},
	{"pause", history.FaultPause, pauseOne},
	{"isolate-from-controllers", history.FaultPartition, isolateFromControllers},
	{"isolate-leader", history.FaultPartition, isolateLeader},
	{"isolate-then-kill-leader", history.FaultPartition, isolateThenKillLeader},
	{"split-controllers", history.FaultPartition, splitControllers},
	{"disk-full", history.FaultDiskFull, fillDisk},
	{"eio", history.FaultEIO, ioError},
	{"power-cut", history.FaultPowerCut, powerCut},
	{"move", history.FaultMove, movePartition},
	{"cancel-and-re-add", history.FaultCancelMove, cancelAndReAdd},
	{"drain", history.FaultDrain, drainNode},
	{"preferred-election", history.FaultPreferredElection, preferredElection},
	{"postgres-restart", history.FaultPostgresRestart, restartPostgres},
	{"kill-coordinator-at-commit", history.FaultKill, killCoordinatorAtCommit},
	{"postgres-crash-at-commit", history.FaultPostgresRestart, crashPostgresAtCommit},
	{"s3-errors", history.FaultS3Errors, breakS3},
	{"s3-slow", history.FaultS3Slow, slowS3},
	{"answers-lost", history.FaultAnswersLost, answersLost},
	{"answers-late", history.FaultAnswersLate, answersLate},
	{"oversize", history.FaultOversize, sendOversize},
}

// faultNamed returns the fault called name.
func faultNamed(name string) fault {
	for _, f := range faults {
		if f.name == name {
			return f
		}
	}
	panic("nemesis: no fault " + name)
}

// pick returns a random element of s.
func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// healed restarts every process of nodes that is not running.
func (r *run) restartAll(ctx context.Context, nodes ...*harness.Node) error {
	var errs []error
	for _, n := range nodes {
		if n.Proc.Exited() {
			if err := r.bed.restart(ctx, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killOne kills any one process with SIGKILL; heal starts it again.
func killOne(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.processes())
	n.Kill()
	return "SIGKILL " + n.Name(), func(ctx context.Context) error { return r.restartAll(ctx, n) }, nil
}

// killSeveral kills two storage nodes, or a storage node and a
// controller, at once.
func killSeveral(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	nodes := r.bed.cluster.StorageNodes()
	rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	victims := nodes[:2]
	if rng.IntN(2) == 0 {
		victims = []*harness.Node{nodes[0], pick(rng, r.bed.cluster.Controllers())}
	}
	var names []string
	for _, n := range victims {
		n.Kill()
		names = append(names, n.Name())
	}
	return "SIGKILL " + strings.Join(names, " and "), func(ctx context.Context) error { return r.restartAll(ctx, victims...) }, nil
}

// pauseOne stops any one process with SIGSTOP; heal continues it.
func pauseOne(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.processes())
	n.Proc.Stop()
	return "SIGSTOP " + n.Name(), func(ctx context.Context) error {
		n.Proc.Continue()
		return nil
	}, nil
}

// cut installs a cut and returns the heal that lifts it.
func (r *run) cut(ctx context.Context, install func() (netcut.CutID, error)) (func(context.Context) error, error) {
	id, err := install()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return r.bed.net.Heal(ctx, id) }, nil
}

// isolateFromControllers cuts one storage node off from every controller,
// one way (the controllers can still call it; it cannot heartbeat or send
// AlterPartition), while its clients and peers still reach it.
func isolateFromControllers(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.cluster.StorageNodes())
	var ps []int
	for _, c := range r.bed.cluster.Controllers() {
		ps = append(ps, ports(c)...)
	}
	heal, err := r.cut(ctx, func() (netcut.CutID, error) { return r.bed.net.Cut(ctx, r.bed.groupOf(n), ps...) })
	return n.Name() + " cannot reach the controllers", heal, err
}

// randomLeader picks a partition of topic and returns its leader and
// the partition's name, "topic-p".
func (r *run) randomLeader(ctx context.Context, topic string, rng *rand.Rand) (*harness.Node, string, error) {
	p, err := r.bed.cluster.Partition(ctx, topic, rng.Int32N(r.partitionsOf(topic)))
	if err != nil || p.GetLeaderId() < 0 {
		return nil, "", fmt.Errorf("no leader of %s: %v", topic, err)
	}
	return r.bed.cluster.Storage(int(p.GetLeaderId())), fmt.Sprintf("%s-%d", topic, p.GetPartition()), nil
}

// isolateLeader cuts a partition's leader off from the other storage
// nodes, both ways (no replication either way), but not from the
// controllers or its clients: the leader of a minority.
func isolateLeader(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	leader, part, err := r.randomLeader(ctx, pick(rng, r.topics), rng)
	if err != nil {
		return "", nil, err
	}
	var others []*netcut.Group
	for _, s := range r.bed.cluster.StorageNodes() {
		if s != leader {
			others = append(others, r.bed.groupOf(s))
		}
	}
	portsOf := r.portsOfGroup()
	heal, err := r.cut(ctx, func() (netcut.CutID, error) {
		return r.bed.net.Partition(ctx, []*netcut.Group{r.bed.groupOf(leader)}, others, portsOf)
	})
	return fmt.Sprintf("%s (leader of %s) cut off from the other storage nodes", leader.Name(), part), heal, err
}

// isolateThenKillLeader cuts a partition's leader off from the other
// storage nodes, lets it go on for a moment (it can still reach the
// controllers and its clients), then kills it: whatever it acknowledged
// that its followers never got would be lost with it, and the followers
// are the ones elected. heal lifts the cut and starts it again.
func isolateThenKillLeader(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	desc, healCut, err := isolateLeader(ctx, r, rng)
	if err != nil {
		return "", nil, err
	}
	// Pacing: shorter than the replica lag time, so the leader still
	// counts its followers in the ISR when it dies.
	sleep(ctx, 2*time.Second)
	var leader *harness.Node
	for _, n := range r.bed.cluster.StorageNodes() {
		if strings.HasPrefix(desc, n.Name()+" ") {
			leader = n
		}
	}
	leader.Kill()
	return desc + "; then SIGKILL " + leader.Name(), func(ctx context.Context) error {
		return errors.Join(healCut(ctx), r.restartAll(ctx, leader))
	}, nil
}

// splitControllers cuts one controller off from the other two, both ways:
// a minority of one and a majority of two.
func splitControllers(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	ctls := r.bed.cluster.Controllers()
	alone := pick(rng, ctls)
	var rest []*netcut.Group
	for _, c := range ctls {
		if c != alone {
			rest = append(rest, r.bed.groupOf(c))
		}
	}
	heal, err := r.cut(ctx, func() (netcut.CutID, error) {
		return r.bed.net.Partition(ctx, []*netcut.Group{r.bed.groupOf(alone)}, rest, r.portsOfGroup())
	})
	return alone.Name() + " split from the other controllers", heal, err
}

// portsOfGroup maps a cgroup back to the ports its process listens on.
func (r *run) portsOfGroup() func(*netcut.Group) []int {
	return func(g *netcut.Group) []int {
		for _, n := range r.bed.processes() {
			if r.bed.groupOf(n) == g {
				return ports(n)
			}
		}
		return nil
	}
}

// fillDisk fills the tmpfs of a storage node that has one: its next
// append or segment roll meets ENOSPC, its log fails and the node stops.
// heal frees the space and starts the node again.
func fillDisk(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	var candidates []*harness.Node
	for _, n := range r.bed.cluster.StorageNodes() {
		if r.bed.disk(n.ID) != nil {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return "", nil, errors.New("no storage node on a tmpfs")
	}
	n := pick(rng, candidates)
	d := r.bed.disk(n.ID)
	if err := d.Fill(0); err != nil {
		return "", nil, err
	}
	return n.Name() + "'s disk full", func(ctx context.Context) error {
		if err := d.Drain(); err != nil {
			return err
		}
		// A node that met ENOSPC stopped; one that did not is left alone.
		return r.restartAll(ctx, n)
	}, nil
}

// faultRequest sends one request to a storage node's /debug/faults.
func faultRequest(ctx context.Context, n *harness.Node, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, n.AdminURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// ioError arms an EIO on the next write or fsync under a storage node's
// data directory: its log fails and the node stops. heal clears the fault
// on a node that never met it and starts a stopped one again.
func ioError(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.cluster.StorageNodes())
	op := pick(rng, []string{"write", "sync"})
	body := fmt.Sprintf(`{"op":%q,"path":%q,"err":"EIO","count":1}`, op, n.DataDir)
	if err := faultRequest(ctx, n, http.MethodPost, "/debug/faults", body); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("EIO on the next %s of %s", op, n.Name()), func(ctx context.Context) error {
		if !n.Proc.Exited() {
			if err := faultRequest(ctx, n, http.MethodDelete, "/debug/faults", ""); err != nil && !n.Proc.Exited() {
				return err
			}
		}
		return r.restartAll(ctx, n)
	}, nil
}

// powerCut cuts a storage node's power: what it had not fsynced is lost
// and the process dies. heal starts it again.
func powerCut(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.cluster.StorageNodes())
	// The node may die before it answers; its death is what counts.
	_ = faultRequest(ctx, n, http.MethodPost, fmt.Sprintf("/debug/faults/power-cut?seed=%d", rng.Int64()), "")
	if !waitExited(ctx, n, 30*time.Second) {
		return "", nil, fmt.Errorf("%s still running after its power cut", n.Name())
	}
	return "power cut of " + n.Name(), func(ctx context.Context) error { return r.restartAll(ctx, n) }, nil
}

// ctl is a controller client, through any controller that runs.
func (r *run) ctl() (cl interface {
	AlterPartitionReassignments(context.Context, *connect.Request[controllerv1.AlterPartitionReassignmentsRequest]) (*connect.Response[controllerv1.AlterPartitionReassignmentsResponse], error)
	DrainNode(context.Context, *connect.Request[controllerv1.DrainNodeRequest]) (*connect.Response[controllerv1.DrainNodeResponse], error)
	ElectLeaders(context.Context, *connect.Request[controllerv1.ElectLeadersRequest]) (*connect.Response[controllerv1.ElectLeadersResponse], error)
}) {
	for _, c := range r.bed.cluster.Controllers() {
		if !c.Proc.Exited() {
			return c.ControllerClient()
		}
	}
	return r.bed.cluster.Controller(1).ControllerClient()
}

// reassign starts (replicas) or cancels (none) a move of one partition and
// returns the error the controller gave it.
func (r *run) reassign(ctx context.Context, topic string, partition int32, replicas []int32) error {
	resp, err := r.ctl().AlterPartitionReassignments(ctx, connect.NewRequest(&controllerv1.AlterPartitionReassignmentsRequest{
		Reassignments: []*controllerv1.PartitionReassignment{{Topic: topic, Partition: partition, Replicas: replicas}},
	}))
	if err != nil {
		return err
	}
	if e := resp.Msg.GetResults()[0].GetError(); e != nil {
		return fmt.Errorf("%s: %s", e.GetReason(), e.GetMessage())
	}
	return nil
}

// randomReplicas picks n distinct storage node ids.
func (r *run) randomReplicas(rng *rand.Rand, n int) []int32 {
	ids := make([]int32, 0, len(r.bed.cluster.StorageNodes()))
	for _, s := range r.bed.cluster.StorageNodes() {
		ids = append(ids, int32(s.ID))
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:n]
}

// movePartition moves a partition to three other-chosen nodes. The move
// completes (or is cancelled by a later fault) on its own; heal does
// nothing.
func movePartition(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	topic := pick(rng, r.topics)
	p := rng.Int32N(r.partitionsOf(topic))
	to := r.randomReplicas(rng, 3)
	if err := r.reassign(ctx, topic, p, to); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("move %s-%d to %v", topic, p, to), nil, nil
}

// cancelAndReAdd walks the path by which a removed replica could once
// rejoin the ISR on stale state: a move adds two nodes, one of which
// cannot reach the leader (so the move cannot complete) while the other
// copies and joins the ISR; then that one is cut off too, the move
// cancelled (both delete their copies) and the same move started again at
// once, so the leader sees the same, now empty, replica added back before
// it can fetch. Half the time the leader then dies: the controller elects
// the first in-sync replica in replica order, which is the re-added node,
// so it must not count as in sync on what its deleted copy fetched.
func cancelAndReAdd(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	// Half the time on the quiet topic: with writes every few milliseconds
	// the high watermark soon passes what a removed replica last fetched,
	// and stale state could not pass for caught up.
	topic := pick(rng, r.topics)
	p := rng.Int32N(r.partitionsOf(topic))
	if rng.IntN(2) == 0 {
		topic = quietTopic // which has as many partitions as any
	}
	cur, err := r.bed.cluster.Partition(ctx, topic, p)
	if err != nil || cur.GetLeaderId() < 0 {
		return "", nil, fmt.Errorf("%s-%d has no leader: %v", topic, p, err)
	}
	var fresh []int32
	for _, id := range r.randomReplicas(rng, len(r.bed.cluster.StorageNodes())) {
		if !slices.Contains(cur.GetReplicas(), id) {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) < 2 {
		return "", nil, fmt.Errorf("%s-%d: fewer than two nodes outside its replicas %v", topic, p, cur.GetReplicas())
	}
	copier, stuck := r.bed.cluster.Storage(int(fresh[0])), r.bed.cluster.Storage(int(fresh[1]))
	leader := r.bed.cluster.Storage(int(cur.GetLeaderId()))
	to := []int32{int32(copier.ID), int32(stuck.ID), int32(leader.ID)}
	desc := fmt.Sprintf("move %s-%d to %v with %s cut from leader %s; once %s is in sync, cut it too, cancel, move again",
		topic, p, to, stuck.Name(), leader.Name(), copier.Name())
	var heals []func(context.Context) error
	healAll := func(ctx context.Context) error {
		var errs []error
		for _, h := range heals {
			errs = append(errs, h(ctx))
		}
		errs = append(errs, r.restartAll(ctx, leader))
		return errors.Join(errs...)
	}
	cutFromLeader := func(n *harness.Node) error {
		h, err := r.cut(ctx, func() (netcut.CutID, error) { return r.bed.net.Cut(ctx, r.bed.groupOf(n), ports(leader)...) })
		if err == nil {
			heals = append(heals, h)
		}
		return err
	}
	if err := cutFromLeader(stuck); err != nil {
		return "", nil, err
	}
	if err := r.reassign(ctx, topic, p, to); err != nil {
		return "", nil, errors.Join(err, healAll(ctx))
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		q, err := r.bed.cluster.Partition(wctx, topic, p)
		if err == nil && slices.Contains(q.GetIsr(), int32(copier.ID)) {
			break
		}
		if !sleep(wctx, 100*time.Millisecond) {
			return desc + fmt.Sprintf(" (%s never joined the ISR; move left running)", copier.Name()), healAll, nil
		}
	}
	if err := cutFromLeader(copier); err != nil {
		return "", nil, errors.Join(err, healAll(ctx))
	}
	if err := r.reassign(ctx, topic, p, nil); err != nil {
		return desc + " (cancel refused: " + err.Error() + ")", healAll, nil
	}
	if err := r.reassign(ctx, topic, p, to); err != nil {
		return desc + " (second move refused: " + err.Error() + ")", healAll, nil
	}
	if rng.IntN(2) == 1 {
		return desc, healAll, nil
	}
	// Let the leader's ISR check run (it runs every second) while the
	// re-added replica cannot fetch, then kill the leader.
	sleep(ctx, 2500*time.Millisecond)
	leader.Kill()
	return desc + "; SIGKILL the leader " + leader.Name(), healAll, nil
}

// drainNode drains a storage node: its replicas move away and it leads
// nothing. heal undrains it.
func drainNode(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, r.bed.cluster.StorageNodes())
	if _, err := r.ctl().DrainNode(ctx, connect.NewRequest(&controllerv1.DrainNodeRequest{NodeId: int32(n.ID)})); err != nil {
		return "", nil, err
	}
	return "drain " + n.Name(), func(ctx context.Context) error {
		_, err := r.ctl().DrainNode(ctx, connect.NewRequest(&controllerv1.DrainNodeRequest{NodeId: int32(n.ID), Undrain: true}))
		return err
	}, nil
}

// preferredElection asks for preferred-leader elections of every topic's
// partitions.
func preferredElection(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	var parts []*commonv1.TopicPartitions
	for _, t := range r.topics {
		parts = append(parts, &commonv1.TopicPartitions{Topic: t})
	}
	if _, err := r.ctl().ElectLeaders(ctx, connect.NewRequest(&controllerv1.ElectLeadersRequest{
		ElectionType: controllerv1.ElectionType_ELECTION_TYPE_PREFERRED, Partitions: parts,
	})); err != nil {
		return "", nil, err
	}
	return "preferred-leader election of every partition", nil, nil
}

// restartPostgres crashes the offsets database (immediate shutdown, as a
// power loss) while commits are in flight, and starts it again.
func restartPostgres(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	if err := r.bed.pg.Stop(ctx, harness.Immediate); err != nil {
		return "", nil, err
	}
	return "PostgreSQL crashed", func(ctx context.Context) error { return r.bed.pg.Start(ctx) }, nil
}

// breakS3 makes the object store unreachable: every connection tiering
// has to it is reset and new ones drop their requests.
func breakS3(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	px := r.bed.tiering.S3Proxy
	px.Drop(harness.ToServer, true)
	px.Reset()
	return "S3 unreachable (connections reset, requests dropped)", func(ctx context.Context) error {
		px.Drop(harness.ToServer, false)
		px.Reset() // connections whose requests were dropped would wait for answers forever
		return nil
	}, nil
}

// slowS3 delays every answer of the object store.
func slowS3(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	px := r.bed.tiering.S3Proxy
	d := time.Duration(500+rng.IntN(1500)) * time.Millisecond
	px.SetDelay(harness.ToClient, d)
	return fmt.Sprintf("S3 answers delayed %v", d), func(ctx context.Context) error {
		px.SetDelay(harness.ToClient, 0)
		return nil
	}, nil
}

// answersLostFor is how long answersLost lasts at least: longer than the
// pipelined producers' delivery timeout, so their batches whose answers
// it drops fail at their deadline while later ones still wait.
const answersLostFor = pipelineDeliveryTimeout + 2*time.Second

// answersLost drops every packet a leader of the pipelined topic sends
// to the workload's clients (netcut.CutAnswers on the test process's
// group), and nothing it sends its followers, the controllers or the
// gateway: requests keep reaching it and being appended, and no answer
// comes back. It lasts answersLostFor whatever the step's hold, so the
// batches whose answers it drops reach their delivery timeout; heal
// lifts the cut and TCP delivers the answers late.
func answersLost(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	leader, part, err := r.randomLeader(ctx, pipelineTopic, rng)
	if err != nil {
		return "", nil, err
	}
	start := time.Now()
	heal, err := r.cut(ctx, func() (netcut.CutID, error) { return r.bed.net.CutAnswers(ctx, r.bed.clients, ports(leader)...) })
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("answers of %s (leader of %s) to its clients dropped for %v", leader.Name(), part, answersLostFor), func(ctx context.Context) error {
		sleep(ctx, time.Until(start.Add(answersLostFor)))
		return heal(ctx)
	}, nil
}

// answersLate delays every answer a leader of the pipelined topic gives
// the pipelined producers (through their proxy in front of it) past their
// calls' timeout: each call times out and its batch is sent again, while
// the first copy is in the log. heal ends the delay for answers read from
// then on; those already held are still delivered late. Held 4 seconds
// (the short schedule), the retries' answers come back within the
// delivery timeout: nothing fails there, and a batch appended twice is
// one rebuilt for another reason (the oversize fault alongside).
func answersLate(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	leader, part, err := r.randomLeader(ctx, pipelineTopic, rng)
	if err != nil {
		return "", nil, err
	}
	px := r.bed.clientProxies.of(leader)
	d := pipelineCallTimeout + time.Duration(500+rng.IntN(1500))*time.Millisecond
	px.SetDelay(harness.ToClient, d)
	return fmt.Sprintf("answers of %s (leader of %s) to the pipelined producers delayed %v", leader.Name(), part, d), func(ctx context.Context) error {
		px.SetDelay(harness.ToClient, 0)
		return nil
	}, nil
}

// sendOversize has the pipelined producers send, while it lasts, a record
// larger than oversizeTopic's max.message.bytes every oversizeEvery: each
// fails with RECORD_TOO_LARGE, an error unrelated to the pipelined
// topic's partitions on the same producer, which must not change what
// happens to their batches.
func sendOversize(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	r.oversizing.Store(true)
	return fmt.Sprintf("pipelined producers send a %d-byte record to %s (max.message.bytes %d) every %v", oversizeRecord, oversizeTopic, oversizeLimit, oversizeEvery),
		func(ctx context.Context) error {
			r.oversizing.Store(false)
			return nil
		}, nil
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// atCommitWait bounds how long a fault timed by a commit waits for one.
const atCommitWait = 15 * time.Second

// atCommit runs do the moment the next transaction of a transactional
// producer has its commit answered (atCommitHook), up to atCommitWait:
// the coordinator answers EndTxn once the decision is durable and writes
// the markers after, so a fault injected then lands between the two.
// do gets the producer and the transaction.
func (r *run) atCommit(ctx context.Context, do func(process, txnID string)) error {
	done := make(chan struct{})
	f := func(process, txnID string) {
		do(process, txnID)
		close(done)
	}
	r.commitHook.Store(&f)
	t := time.NewTimer(atCommitWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	if r.commitHook.CompareAndSwap(&f, nil) {
		return fmt.Errorf("no transaction committed within %v", atCommitWait)
	}
	<-done // a producer took it meanwhile
	return nil
}

// atCommitHook is called by a transactional producer when its commit of
// txnID was answered ok; it runs the fault waiting for one, if any.
func (r *run) atCommitHook(process, txnID string) {
	if f := r.commitHook.Swap(nil); f != nil {
		(*f)(process, txnID)
	}
}

// killCoordinatorAtCommit kills the coordinator the moment a
// transaction's commit is answered: its markers are then still to write,
// and the restarted coordinator (or another owner) must finish them from
// the PrepareCommit it recorded.
func killCoordinatorAtCommit(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	coords := r.bed.group.Coordinators
	var desc string
	err := r.atCommit(ctx, func(process, txnID string) {
		var names []string
		for _, n := range coords {
			n.Kill()
			names = append(names, n.Name())
		}
		desc = fmt.Sprintf("SIGKILL %s as %s's commit of %s was answered", strings.Join(names, " and "), process, txnID)
	})
	if err != nil {
		return "", nil, err
	}
	return desc, func(ctx context.Context) error { return r.restartAll(ctx, coords...) }, nil
}

// crashPostgresAtCommit crashes the coordinator's PostgreSQL the moment a
// transaction's commit is answered: the coordinator then writes the
// markers but cannot record the transaction complete until it is back.
func crashPostgresAtCommit(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	var desc string
	var stopErr error
	err := r.atCommit(ctx, func(process, txnID string) {
		stopErr = r.bed.pg.Stop(ctx, harness.Immediate)
		desc = fmt.Sprintf("PostgreSQL crashed as %s's commit of %s was answered", process, txnID)
	})
	if err == nil {
		err = stopErr
	}
	if err != nil {
		return "", nil, err
	}
	return desc, func(ctx context.Context) error { return r.bed.pg.Start(ctx) }, nil
}
