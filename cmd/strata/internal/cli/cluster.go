package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

type clusterJSON struct {
	ClusterID                 string           `json:"cluster_id"`
	MetadataVersion           int64            `json:"metadata_version"`
	ActiveController          string           `json:"active_controller"`
	Controllers               []controllerJSON `json:"controllers"`
	Nodes                     []nodeJSON       `json:"nodes"`
	OfflinePartitions         int32            `json:"offline_partitions"`
	UnderReplicatedPartitions int32            `json:"under_replicated_partitions"`
	Services                  []serviceJSON    `json:"services"`
	Healthy                   bool             `json:"healthy"`
	Problems                  []string         `json:"problems"`
}

type controllerJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Active  bool   `json:"active"`
	Healthy bool   `json:"healthy"`
}

type nodeJSON struct {
	ID      int32  `json:"id"`
	Address string `json:"address"`
	Rack    string `json:"rack"`
	State   string `json:"state"`
	Drained bool   `json:"drained"`
}

type serviceJSON struct {
	Service string `json:"service"`
	Address string `json:"address"`
	Healthy bool   `json:"healthy"`
	Message string `json:"message,omitempty"`
}

func nodeState(s controllerv1.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

// health judges the cluster for --exit-when-healthy: an active
// controller, every registered node alive, no partition offline or
// under-replicated. The reachability of other services (coordinator,
// tiering) is shown but not judged, so a cluster that does not run them
// yet can still be healthy.
func health(m *gatewayv1.DescribeClusterResponse) []string {
	problems := []string{}
	if m.GetControllers().GetActiveControllerId() == "" {
		problems = append(problems, "no active controller")
	}
	if len(m.GetNodes()) == 0 {
		problems = append(problems, "no storage nodes")
	}
	for _, n := range m.GetNodes() {
		// A drained node that was stopped is retired, not a problem.
		retired := n.GetDrained() && n.GetState() == controllerv1.NodeState_NODE_STATE_DEAD
		if n.GetState() != controllerv1.NodeState_NODE_STATE_ALIVE && !retired {
			problems = append(problems, fmt.Sprintf("node %d is %s", n.GetNode().GetNodeId(), nodeState(n.GetState())))
		}
	}
	if n := m.GetOfflinePartitions(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d partitions offline", n))
	}
	if n := m.GetUnderReplicatedPartitions(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d partitions under-replicated", n))
	}
	return problems
}

func statusJSON(m *gatewayv1.DescribeClusterResponse) clusterJSON {
	problems := health(m)
	j := clusterJSON{ClusterID: m.GetClusterId(), MetadataVersion: m.GetMetadataVersion(),
		ActiveController: m.GetControllers().GetActiveControllerId(), Controllers: []controllerJSON{}, Nodes: []nodeJSON{},
		OfflinePartitions: m.GetOfflinePartitions(), UnderReplicatedPartitions: m.GetUnderReplicatedPartitions(),
		Services: []serviceJSON{}, Healthy: len(problems) == 0, Problems: problems}
	for _, c := range m.GetControllers().GetMembers() {
		j.Controllers = append(j.Controllers, controllerJSON{c.GetControllerId(), c.GetAddress(), c.GetActive(), c.GetHealthy()})
	}
	for _, n := range m.GetNodes() {
		j.Nodes = append(j.Nodes, nodeJSON{n.GetNode().GetNodeId(), n.GetNode().GetAddress(), n.GetNode().GetRack(), nodeState(n.GetState()), n.GetDrained()})
	}
	for _, s := range m.GetServices() {
		j.Services = append(j.Services, serviceJSON{s.GetService(), s.GetAddress(), s.GetHealthy(), s.GetMessage()})
	}
	return j
}

func printStatus(e *Env, m *gatewayv1.DescribeClusterResponse) error {
	j := statusJSON(m)
	if e.Output == "json" {
		return writeJSON(e.Stdout, j)
	}
	w := e.Stdout
	fmt.Fprintf(w, "cluster %s  metadata version %d\n", j.ClusterID, j.MetadataVersion)
	active := j.ActiveController
	if active == "" {
		active = "none"
	}
	fmt.Fprintf(w, "controllers: %d, active %s\n", len(j.Controllers), active)
	var rows [][]string
	for _, c := range j.Controllers {
		role, ok := "standby", "healthy"
		if c.Active {
			role = "active"
		}
		if !c.Healthy {
			ok = "unhealthy"
		}
		rows = append(rows, []string{"  " + c.ID, c.Address, role, ok})
	}
	if len(rows) > 0 {
		table(w, []string{"  CONTROLLER", "ADDRESS", "ROLE", "HEALTH"}, rows)
	}
	alive := 0
	rows = nil
	for _, n := range j.Nodes {
		if n.State == "alive" {
			alive++
		}
		state := n.State
		if n.Drained {
			state += ", drained"
		}
		rows = append(rows, []string{fmt.Sprintf("  %d", n.ID), n.Address, state, n.Rack})
	}
	fmt.Fprintf(w, "nodes: %d, %d alive\n", len(j.Nodes), alive)
	if len(rows) > 0 {
		table(w, []string{"  NODE", "ADDRESS", "STATE", "RACK"}, rows)
	}
	fmt.Fprintf(w, "partitions: %d offline, %d under-replicated\n", j.OfflinePartitions, j.UnderReplicatedPartitions)
	if len(j.Services) > 0 {
		rows = nil
		for _, s := range j.Services {
			st := "healthy"
			if !s.Healthy {
				st = "unhealthy"
				if s.Message != "" {
					st += ": " + oneLine(s.Message)
				}
			}
			rows = append(rows, []string{"  " + s.Service, s.Address, st})
		}
		fmt.Fprintln(w, "services:")
		table(w, []string{"  SERVICE", "ADDRESS", "STATUS"}, rows)
	}
	if j.Healthy {
		fmt.Fprintln(w, "healthy: yes")
	} else {
		fmt.Fprintf(w, "healthy: no (%s)\n", strings.Join(j.Problems, "; "))
	}
	return nil
}

func clusterStatus(ctx context.Context, e *Env, args []string) error {
	var watch, exitHealthy bool
	var timeout, interval time.Duration
	f := newFlags(e, "strata cluster status [--watch] [--exit-when-healthy]",
		`Show the controllers (and which is active), the storage nodes, partition health
(offline and under-replicated partitions) and the other services' reachability.
The cluster is healthy when a controller is active, every node is alive and no
partition is offline or under-replicated.

--exit-when-healthy polls until the cluster is healthy, prints its status and
exits 0, or exits 1 after --timeout (an unreachable gateway counts as not yet
healthy). --watch prints the status every --interval until interrupted.`,
		"strata cluster status --exit-when-healthy --timeout 2m")
	f.Bool(&watch, "w", "watch", "refresh until interrupted")
	f.Bool(&exitHealthy, "", "exit-when-healthy", "wait until the cluster is healthy, then exit 0")
	f.Duration(&timeout, "", "timeout", "DURATION", time.Minute, "how long --exit-when-healthy waits")
	f.Duration(&interval, "", "interval", "DURATION", 2*time.Second, "refresh interval of --watch and --exit-when-healthy")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if interval <= 0 {
		return usagef("--interval must be positive")
	}
	gw := e.gateway()
	describe := func() (*gatewayv1.DescribeClusterResponse, error) {
		rctx, cancel := withTimeout(ctx)
		defer cancel()
		resp, err := gw.DescribeCluster(rctx, connect.NewRequest(&gatewayv1.DescribeClusterRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	if !watch && !exitHealthy {
		m, err := describe()
		if err != nil {
			return err
		}
		return printStatus(e, m)
	}
	var deadline <-chan time.Time
	if exitHealthy {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		m, err := describe()
		switch {
		case err == nil && exitHealthy && len(health(m)) == 0:
			return printStatus(e, m)
		case err == nil:
			last = fmt.Errorf("%s", strings.Join(health(m), "; "))
			if watch {
				if e.Output == "text" {
					fmt.Fprintf(e.Stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
				}
				if err := printStatus(e, m); err != nil {
					return err
				}
			}
		case ctx.Err() != nil:
			return nil
		default:
			last = err
			if watch {
				fmt.Fprintln(e.Stderr, "strata: "+e.explain(err))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return fmt.Errorf("cluster not healthy after %v: %s", timeout, e.explain(last))
		case <-tick.C:
		}
	}
}
