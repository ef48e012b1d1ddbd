//go:build kafka

package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// debianPython is the interpreter Debian's python3-confluent-kafka is
// installed for (a python3 earlier on PATH may not see it).
const debianPython = "/usr/bin/python3"

// TestKafkaCooperativeSlowRevoke runs librdkafka's cooperative-sticky
// assignor (testdata/coopmember.py) in a group of two. The first member
// reads every record of a six-partition topic without committing; when
// the second joins, the first is asked to give up some partitions and
// takes 10 s in its revoke callback before it commits their positions.
// As in Kafka, the partitions it is revoking stay its own until its next
// JoinGroup: its commit succeeds, the second member starts them at that
// commit, and no record is read twice. A coordinator that released them
// at once would let the second member read them from the start (read
// twice) and refuse the first member's commit.
func TestKafkaCooperativeSlowRevoke(t *testing.T) {
	if out, err := exec.Command(debianPython, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		t.Fatalf("this test runs librdkafka through Debian's python3-confluent-kafka, which %s cannot import (apt-get install python3-confluent-kafka): %v: %s", debianPython, err, out)
	}
	d, cli := kafkaDev(t)
	ctx := harness.Deadline(t, 5*time.Minute)
	if _, err := cli("", "topic", "create", "coop", "-p", "6", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	pr := kafkaClient(t, d, kgo.DefaultProduceTopic("coop"))
	produceN := func(from, to int) { produceNumbered(ctx, t, pr, from, to) }
	produceN(0, 600)

	g := &coopGroup{reads: map[string][]string{}}
	a := g.start(ctx, t, d.File.KafkaBootstrap, "a", 10*time.Second)
	testwait.Until(t, 2*time.Minute, "the first member to read all 600 records", g.readAll(600))
	b := g.start(ctx, t, d.File.KafkaBootstrap, "b", 0)

	testwait.Until(t, 2*time.Minute, "the first member to give up partitions and commit them", func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if a.failed != "" {
			t.Fatalf("the first member's commit in its revoke callback failed: %s", a.failed)
		}
		if len(a.committed) == 0 {
			return fmt.Errorf("revoking %v, nothing committed yet", a.revoking)
		}
		return nil
	})
	testwait.Until(t, time.Minute, "the second member to own partitions", func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(b.owned) == 0 {
			return fmt.Errorf("first member owns %v, second none", a.owned)
		}
		return nil
	})
	produceN(600, 1200)
	testwait.Until(t, 2*time.Minute, "the group to read all 1200 records", g.readAll(1200))

	g.mu.Lock()
	defer g.mu.Unlock()
	t.Logf("first member owns %v (committed %v in its revoke callback), second owns %v", a.owned, a.committed, b.owned)
	for v, by := range g.reads {
		if len(by) > 1 {
			t.Errorf("record %s read %d times: %v", v, len(by), by)
		}
	}
	for _, c := range a.committed {
		if c.Error != nil {
			t.Errorf("the commit of partition %d at %d failed: %s", c.Partition, c.Offset, *c.Error)
		}
	}
	if b.read == 0 {
		t.Error("the second member read none of the last 600 records")
	}
}

// coopGroup gathers what the members of TestKafkaCooperativeSlowRevoke
// print.
type coopGroup struct {
	mu    sync.Mutex
	reads map[string][]string // record value -> "member partition/offset" of each read
}

type coopMember struct {
	name      string
	owned     []int32
	revoking  []int32
	committed []coopCommit
	failed    string // a commit_failed event's error
	read      int
}

type coopCommit struct {
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Error     *string `json:"error"`
}

type coopEvent struct {
	Event      string          `json:"event"`
	Partitions json.RawMessage `json:"partitions"`
	Partition  int32           `json:"partition"`
	Offset     int64           `json:"offset"`
	Value      string          `json:"value"`
	Error      string          `json:"error"`
}

// start runs one member (coopmember.py) until the test ends, its events
// folded into g.
func (g *coopGroup) start(ctx context.Context, t *testing.T, bootstrap, name string, revoke time.Duration) *coopMember {
	t.Helper()
	m := &coopMember{name: name}
	cmd := exec.CommandContext(ctx, debianPython, filepath.Join("testdata", "coopmember.py"),
		bootstrap, "coop-group", "coop", fmt.Sprint(revoke.Seconds()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("member %s's stderr:\n%s", name, stderr.String())
		}
	})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e coopEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("member %s printed %q: %v", name, sc.Text(), err)
				continue
			}
			if line := g.fold(m, e); line {
				t.Logf("member %s: %s", name, sc.Text())
			}
		}
	}()
	return m
}

// fold adds e, printed by m, to g; it reports whether the line is one
// to show in the test's log ("error" and unknown events).
func (g *coopGroup) fold(m *coopMember, e coopEvent) (show bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var parts []int32
	switch e.Event {
	case "assigned", "revoking":
		_ = json.Unmarshal(e.Partitions, &parts)
	}
	switch e.Event {
	case "record":
		m.read++
		g.reads[e.Value] = append(g.reads[e.Value], fmt.Sprintf("%s %d/%d", m.name, e.Partition, e.Offset))
	case "assigned":
		m.owned = append(m.owned, parts...)
		slices.Sort(m.owned)
	case "revoking":
		m.revoking = parts
		m.owned = slices.DeleteFunc(m.owned, func(p int32) bool { return slices.Contains(parts, p) })
	case "committed":
		var cs []coopCommit
		_ = json.Unmarshal(e.Partitions, &cs)
		m.committed = append(m.committed, cs...)
	case "commit_failed":
		m.failed = e.Error
	default:
		return true
	}
	return false
}

func (g *coopGroup) readAll(n int) func() error {
	return func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i := range n {
			if len(g.reads[fmt.Sprint(i)]) == 0 {
				return fmt.Errorf("record %d not read yet (%d distinct read)", i, len(g.reads))
			}
		}
		return nil
	}
}
