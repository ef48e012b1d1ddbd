package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// Kafka protocol tests (docs/kafka.md): clients nobody here wrote, against
// the Kafka listeners of a real `strata dev`.

// kafkaDev starts strata dev and checks that cluster.json names the Kafka
// bootstrap at P+5.
func kafkaDev(t *testing.T, env ...string) (*harness.Dev, func(stdin string, args ...string) (string, error)) {
	t.Helper()
	d := harness.StartDevEnv(t, env)
	if want := fmt.Sprintf("127.0.0.1:%d", d.BasePort+5); d.File.KafkaBootstrap != want {
		t.Fatalf("cluster.json kafka_bootstrap %q, want %q", d.File.KafkaBootstrap, want)
	}
	cli := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(d.Strata, append([]string{"--gateway", d.Gateways[0]}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("strata %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	return d, cli
}

// kafkaClient is a franz-go client on the dev cluster's bootstrap.
func kafkaClient(t *testing.T, d *harness.Dev, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(d.File.KafkaBootstrap)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// cliRecord is one line of `strata consume -f json`.
type cliRecord struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
}

func parseCLIRecords(t *testing.T, out string) []cliRecord {
	t.Helper()
	var recs []cliRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r cliRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consumed line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// consumeAll reads topic from the start with a franz-go direct consumer
// (no group) until want records arrived.
func consumeAll(t *testing.T, d *harness.Dev, topic string, want int) []*kgo.Record {
	t.Helper()
	return consumeUntil(t, d, topic, fmt.Sprintf("%d records", want), func(got []*kgo.Record) bool { return len(got) >= want })
}

// consumeUntil reads topic from the start with a franz-go direct consumer
// (no group), with opts added to its options, until done holds for what
// was read.
func consumeUntil(t *testing.T, d *harness.Dev, topic, what string, done func([]*kgo.Record) bool, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := kafkaClient(t, d, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx := harness.Deadline(t, 60*time.Second)
	var out []*kgo.Record
	for !done(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records of %s before the deadline, waiting for %s", len(out), topic, what)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s-%d: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

// TestKafkaClients runs franz-go (produce idempotently, consume, admin
// through kadm), kcat (-L, -P, -C), sarama, segmentio/kafka-go and
// Strata's own CLI (a Connect
// client) against one strata dev, and checks that both protocols see the
// same records at the same offsets with the same headers, both ways.
func TestKafkaClients(t *testing.T) {
	t.Parallel()
	// Told to KIP-848 members (classic ones keep their own), so the
	// KIP-848 group settles within seconds.
	d, cli := kafkaDev(t, "STRATA_HEARTBEAT_INTERVAL=1s")
	// sarama and segmentio/kafka-go (kafka_clients_test.go) share the
	// cluster, each on its own topic and group; they run once this
	// function returns.
	t.Run("exact answers", func(t *testing.T) { testKafkaExactAnswers(t, harness.Deadline(t, 3*time.Minute), d) })
	t.Run("sarama", func(t *testing.T) {
		t.Parallel()
		kafkaSarama(t, d, cli)
	})
	t.Run("kafka-go", func(t *testing.T) {
		t.Parallel()
		kafkaKafkaGo(t, d, cli)
	})
	ctx := harness.Deadline(t, 3*time.Minute)
	kc := kafkaClient(t, d)
	adm := kadm.NewClient(kc)

	t.Run("admin", func(t *testing.T) {
		resp, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "events")
		if err != nil || resp.Err != nil {
			t.Fatalf("create topic: %v %v", err, resp.Err)
		}
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, "events"); err == nil {
			resp, _ := adm.CreateTopics(ctx, 1, 1, nil, "events")
			if !errors.Is(resp["events"].Err, kerr.TopicAlreadyExists) {
				t.Fatalf("second create: %v, want TOPIC_ALREADY_EXISTS", resp["events"].Err)
			}
		}
		md, err := adm.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The 3 storage nodes, and the coordinator, which registered with
		// the controller: listed before any FindCoordinator.
		if len(md.Brokers) != 4 {
			t.Fatalf("metadata brokers %v, want the 3 storage nodes and the coordinator", md.Brokers)
		}
		for _, b := range md.Brokers {
			want := fmt.Sprintf("127.0.0.1:%d", d.BasePort+40+int(b.NodeID))
			if b.NodeID >= coordinatorNodeIDBase {
				want = d.Process(t, "coordinator", 1).KafkaAddress
			}
			if fmt.Sprintf("%s:%d", b.Host, b.Port) != want {
				t.Errorf("broker %d at %s:%d, want %s", b.NodeID, b.Host, b.Port, want)
			}
		}
		td := md.Topics["events"]
		if len(td.Partitions) != 3 {
			t.Fatalf("events has %d partitions", len(td.Partitions))
		}
		for _, p := range td.Partitions {
			if p.Leader < 1 || len(p.Replicas) != 3 {
				t.Errorf("partition %d: leader %d replicas %v", p.Partition, p.Leader, p.Replicas)
			}
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On("events", nil)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" {
				found = c.MaybeValue() == "3600000" && c.Source == 1 // DYNAMIC_TOPIC_CONFIG
			}
		}
		if !found {
			t.Errorf("retention.ms override not described: %+v", rc.Configs)
		}
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")}}, "events"); err != nil {
			t.Fatal(err)
		}
		out, err := cli("", "topic", "describe", "events", "--output", "json")
		if err != nil || !strings.Contains(out, "7200000") {
			t.Errorf("retention.ms altered through Kafka not seen by the CLI: %v %s", err, out)
		}
		if cp, err := adm.UpdatePartitions(ctx, 4, "events"); err != nil || cp["events"].Err != nil {
			t.Fatalf("partitions to 4: %v %v", err, cp["events"].Err)
		}
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, "doomed"); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.DeleteTopic(ctx, "doomed"); err != nil {
			t.Fatal(err)
		}
		cluster, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, kc)
		if err != nil || cluster.ErrorCode != 0 || len(cluster.Brokers) != 4 || cluster.ControllerID < 1 {
			t.Fatalf("describe cluster: %v %+v", err, cluster)
		}
		testwait.Until(t, 30*time.Second, "events to have 4 partitions and doomed to be gone", func() error {
			td, err := adm.ListTopics(ctx)
			if err != nil {
				return err
			}
			if td.Has("doomed") || len(td["events"].Partitions) != 4 {
				return fmt.Errorf("topics %v", td.Names())
			}
			return nil
		})
	})

	// The admin APIs kafka-acls.sh, kafka-reassign-partitions.sh and
	// kafka-leader-election.sh call, through kadm (docs/kafka.md).
	t.Run("ACLs, moves, elections and epochs", func(t *testing.T) { testKafkaClusterAdmin(t, ctx, d, cli, adm) })
	t.Run("DescribeProducers and DeleteRecords", func(t *testing.T) { testKafkaDeleteRecords(t, ctx, d, adm) })
	t.Run("what frameworks call at start", func(t *testing.T) { testKafkaFrameworkCalls(t, ctx, d, adm) })

	// Kafka producer -> Kafka consumer and Connect consumer.
	t.Run("franz-go to CLI", func(t *testing.T) {
		if _, err := cli("", "topic", "create", "k2c", "-p", "3", "-r", "3"); err != nil {
			t.Fatal(err)
		}
		pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("k2c"))
		const n = 300
		var rs []*kgo.Record
		for i := range n {
			rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("v%d", i)),
				Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprintf("h%d", i))}}})
		}
		if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		acked := map[string]*kgo.Record{}
		for _, r := range rs {
			acked[string(r.Value)] = r
		}
		got := consumeAll(t, d, "k2c", n)
		for _, r := range got {
			a := acked[string(r.Value)]
			if a == nil || a.Partition != r.Partition || a.Offset != r.Offset || string(r.Headers[0].Value) != string(a.Headers[0].Value) {
				t.Fatalf("consumed %s at %d/%d, acknowledged %+v", r.Value, r.Partition, r.Offset, a)
			}
		}
		out, err := cli("", "consume", "k2c", "-o", "start", "-e", "-f", "json")
		if err != nil {
			t.Fatal(err)
		}
		recs := parseCLIRecords(t, out)
		if len(recs) != n {
			t.Fatalf("CLI read %d records, want %d", len(recs), n)
		}
		for _, r := range recs {
			a := acked[r.Value]
			if a == nil || a.Partition != r.Partition || a.Offset != r.Offset || string(a.Key) != r.Key || r.Headers["trace"] != string(a.Headers[0].Value) {
				t.Fatalf("CLI read %+v, franz-go acknowledged %+v", r, a)
			}
		}
	})

	// Connect producer -> Kafka consumer.
	t.Run("CLI to franz-go", func(t *testing.T) {
		if _, err := cli("", "topic", "create", "c2k", "-p", "2", "-r", "3"); err != nil {
			t.Fatal(err)
		}
		var in strings.Builder
		for i := range 50 {
			fmt.Fprintf(&in, "k%d\tv%d\n", i%5, i)
		}
		out, err := cli(in.String(), "produce", "c2k", "-f", "%k\t%v\n", "-H", "origin=connect", "--output", "json")
		if err != nil {
			t.Fatal(err)
		}
		type report struct {
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Key       string `json:"key"`
		}
		var reports []report
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var r report
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("report %q: %v", sc.Text(), err)
			}
			reports = append(reports, r)
		}
		if len(reports) != 50 {
			t.Fatalf("%d delivery reports", len(reports))
		}
		got := consumeAll(t, d, "c2k", 50)
		at := map[[2]int64]*kgo.Record{}
		for _, r := range got {
			at[[2]int64{int64(r.Partition), r.Offset}] = r
			if len(r.Headers) != 1 || r.Headers[0].Key != "origin" || string(r.Headers[0].Value) != "connect" {
				t.Fatalf("record %s headers %v", r.Value, r.Headers)
			}
		}
		for _, rep := range reports {
			r := at[[2]int64{int64(rep.Partition), rep.Offset}]
			if r == nil || string(r.Key) != rep.Key {
				t.Fatalf("acknowledged %+v, franz-go read %v", rep, r)
			}
		}
	})

	// FindCoordinator names the coordinator's own Kafka listener, as
	// cluster.json gives it, and Metadata lists it under that broker id.
	t.Run("FindCoordinator names the coordinator", func(t *testing.T) {
		var want string
		for _, p := range d.File.Processes {
			if p.Service == "coordinator" {
				want = p.KafkaAddress
			}
		}
		if want == "" {
			t.Fatalf("no coordinator kafka_address in cluster.json: %+v", d.File.Processes)
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = "find-me", []string{"find-me"}
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Coordinators) != 1 || resp.Coordinators[0].ErrorCode != 0 {
			t.Fatalf("FindCoordinator: %+v", resp.Coordinators)
		}
		c := resp.Coordinators[0]
		if got := fmt.Sprintf("%s:%d", c.Host, c.Port); got != want {
			t.Fatalf("FindCoordinator named %s (node %d), want the coordinator's %s", got, c.NodeID, want)
		}
		md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, b := range md.Brokers {
			listed = listed || (b.NodeID == c.NodeID && fmt.Sprintf("%s:%d", b.Host, b.Port) == want)
		}
		if !listed {
			t.Fatalf("Metadata brokers %+v lack the coordinator %d at %s", md.Brokers, c.NodeID, want)
		}
	})

	// A franz-go consumer across many partitions uses fetch sessions
	// (KIP-227): each storage node opens one on the first full fetch and
	// then serves incremental ones, which still deliver every record.
	t.Run("fetch sessions", func(t *testing.T) {
		if _, err := cli("", "topic", "create", "sess", "-p", "12", "-r", "3"); err != nil {
			t.Fatal(err)
		}
		pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("sess"))
		acked := map[[2]int64]string{}
		produceKeyed(t, ctx, pr, acked, 0, 600)
		cons := kafkaClient(t, d, kgo.ConsumeTopics("sess"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(200*time.Millisecond))
		read := map[[2]int64]string{}
		pollInto(t, ctx, cons, read, func() error {
			if len(read) < 600 {
				return fmt.Errorf("%d of 600 records read", len(read))
			}
			if f := kafkaFetches(t, ctx, d, nil); f["full"] < 1 || f["incremental"] < 3 {
				return fmt.Errorf("storage nodes' fetches by session: %v", f)
			}
			return nil
		})
		before := kafkaFetches(t, ctx, d, nil)
		produceKeyed(t, ctx, pr, acked, 600, 1200)
		pollInto(t, ctx, cons, read, func() error {
			if len(read) < len(acked) {
				return fmt.Errorf("%d of %d records read", len(read), len(acked))
			}
			return nil
		})
		checkRead(t, acked, read)
		after := kafkaFetches(t, ctx, d, nil)
		if after["incremental"] <= before["incremental"] || after["error"] != 0 || after["sessions"] < 1 {
			t.Fatalf("fetches by session before the second round %v, after %v: want more incremental ones, no session errors, a session open", before, after)
		}
		t.Logf("fetches by session: %v", after)
	})

	// Transactions are offered: a transactional producer begins, writes
	// and commits (kafka_txn_test.go checks what readers see).
	t.Run("transactions", func(t *testing.T) {
		if _, err := cli("", "topic", "create", "ktx", "-p", "1", "-r", "3"); err != nil {
			t.Fatal(err)
		}
		tx := kafkaClient(t, d, kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("ktx"))
		if err := tx.BeginTransaction(); err != nil { // franz-go initializes the transactional producer id here
			t.Fatalf("BeginTransaction: %v", err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("transactional produce: %v", err)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("EndTransaction: %v", err)
		}
	})

	// franz-go's KIP-848 consumer (kafka_kip848_test.go).
	t.Run("KIP-848 group", func(t *testing.T) { testKIP848Group(t, ctx, d, cli) })
	t.Run("KIP-848 range assignor", func(t *testing.T) { testKIP848Range(t, ctx, d, cli) })
	t.Run("KIP-848 static member", func(t *testing.T) { testKIP848StaticMember(t, ctx, d, cli) })
	t.Run("KIP-848 regex subscription", func(t *testing.T) { testKIP848Regex(t, ctx, d, cli) })

	// kcat: librdkafka's metadata, producer and consumer.
	t.Run("kcat", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatal("kcat is not installed (Debian package kcat; .ci/run installs it)")
		}
		run := func(stdin string, args ...string) string {
			t.Helper()
			cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", d.File.KafkaBootstrap}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("kcat %s: %v: %s", strings.Join(args, " "), err, errb.String())
			}
			return out.String()
		}
		if _, err := cli("", "topic", "create", "kc", "-p", "3", "-r", "3"); err != nil {
			t.Fatal(err)
		}
		md := run("", "-L", "-t", "kc")
		for id := 1; id <= 3; id++ {
			if want := fmt.Sprintf("broker %d at 127.0.0.1:%d", id, d.BasePort+40+id); !strings.Contains(md, want) {
				t.Fatalf("kcat -L lacks %q:\n%s", want, md)
			}
		}
		if !strings.Contains(md, `topic "kc" with 3 partitions`) {
			t.Fatalf("kcat -L:\n%s", md)
		}
		run("one\ntwo\nthree\n", "-P", "-t", "kc", "-p", "1", "-H", "via=kcat")
		out := run("", "-C", "-t", "kc", "-p", "1", "-o", "beginning", "-e", "-f", "%o %s %h\n")
		if out != "0 one via=kcat\n1 two via=kcat\n2 three via=kcat\n" {
			t.Fatalf("kcat -C read:\n%s", out)
		}
		recs, err := cli("", "consume", "kc", "-p", "1", "-o", "start", "-e", "-f", "json")
		if err != nil {
			t.Fatal(err)
		}
		got := parseCLIRecords(t, recs)
		if len(got) != 3 || got[2].Value != "three" || got[2].Offset != 2 || got[2].Headers["via"] != "kcat" {
			t.Fatalf("CLI read %+v", got)
		}
	})
}

// produceKeyed produces records from to to (values "v<i>", keys spread
// over the partitions) to pr's default topic and records where each was
// acknowledged in acked.
func produceKeyed(t *testing.T, ctx context.Context, pr *kgo.Client, acked map[[2]int64]string, from, to int) {
	t.Helper()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	for _, r := range rs {
		acked[[2]int64{int64(r.Partition), r.Offset}] = string(r.Value)
	}
}

// pollInto polls cl into read (partition and offset to value, failing on
// an offset read twice with another value) until done returns nil.
func pollInto(t *testing.T, ctx context.Context, cl *kgo.Client, read map[[2]int64]string, done func() error) {
	t.Helper()
	testwait.Until(t, 60*time.Second, "records and fetch sessions", func() error {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		fs := cl.PollFetches(pctx)
		for _, r := range fs.Records() {
			at := [2]int64{int64(r.Partition), r.Offset}
			if v, ok := read[at]; ok && v != string(r.Value) {
				t.Fatalf("partition %d offset %d read as %s and %s", r.Partition, r.Offset, v, r.Value)
			}
			read[at] = string(r.Value)
		}
		return done()
	})
}

// checkRead fails unless every acknowledged record was read at its
// partition and offset.
func checkRead(t *testing.T, acked, read map[[2]int64]string) {
	t.Helper()
	for at, v := range acked {
		if read[at] != v {
			t.Fatalf("%s acknowledged at partition %d offset %d, read there: %q", v, at[0], at[1], read[at])
		}
	}
}

// kafkaFetches sums the storage nodes' Kafka Fetch requests by session
// (none, full, incremental, error; docs/kafka.md) and their open sessions
// ("sessions"), from /metrics of every storage node not in skip.
func kafkaFetches(t *testing.T, ctx context.Context, d *harness.Dev, skip map[string]bool) map[string]float64 {
	t.Helper()
	all := map[string]bool{}
	for k := range skip {
		all[k] = true
	}
	for _, p := range d.File.Processes {
		if p.Service != "storage" {
			all[fmt.Sprintf("%s-%d", p.Service, p.ID)] = true
		}
	}
	samples, err := scrape(ctx, d, all)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	m := metricSet(samples)
	out := map[string]float64{}
	for _, kind := range []string{"none", "full", "incremental", "error"} {
		out[kind], _ = m.sum("strata_kafka_fetch_requests_total", map[string]string{"session": kind})
	}
	out["sessions"], _ = m.sum("strata_kafka_fetch_sessions", nil)
	return out
}
