package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestKafkaSecure runs Kafka clients against the Kafka listeners of
// `strata dev --secure` (docs/kafka.md, "Security"): TLS verified by the
// dev CA and SASL with Strata tokens. The token of ops (allowed all on
// every topic, group and the cluster; the super user User:admin is a
// certificate principal whose name no token user may take) produces and
// consumes with franz-go over SASL PLAIN; a user
// granted read on one topic sees only that topic in Metadata, reads it,
// and is refused TOPIC_AUTHORIZATION_FAILED when producing to it, over
// OAUTHBEARER as over PLAIN, and its consumer group needs read on the
// group; SCRAM-SHA-256 and SCRAM-SHA-512 (username the user, password
// its token) produce and consume as PLAIN does, the reader's grants still
// apply, and a wrong token is refused; a wrong token fails authentication;
// kcat -L works with SASL_SSL and with the admin's certificate over SSL,
// and kcat produces and consumes over SCRAM-SHA-256.
func TestKafkaSecure(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t, "--secure", "--storage-nodes", "1")
	ctx := harness.Deadline(t, 3*time.Minute)
	if want := fmt.Sprintf("127.0.0.1:%d", d.BasePort+5); d.File.KafkaBootstrap != want || d.File.KafkaSecurityProtocol != "SASL_SSL" {
		t.Fatalf("cluster.json: kafka_bootstrap %q, kafka_security_protocol %q; want %s, SASL_SSL", d.File.KafkaBootstrap, d.File.KafkaSecurityProtocol, want)
	}
	admin := readAdminEnv(t, filepath.Join(d.Dir, "admin.env"))
	var adminEnv []string
	for k, v := range admin {
		adminEnv = append(adminEnv, k+"="+v)
	}
	cli := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r := runCLIEnv(cctx, t, d.Strata, adminEnv, "", args...)
		if r.code != 0 {
			t.Fatalf("strata %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		return r.stdout
	}
	tokenOf := func(user string) string {
		return strings.TrimPrefix(strings.TrimSpace(cli("user", "create", user)), "STRATA_TOKEN=")
	}
	cli("topic", "create", "granted", "-p", "1", "-r", "1")
	cli("topic", "create", "hidden", "-p", "1", "-r", "1")
	// The super user User:admin is a certificate principal: its name is
	// reserved, so the token user with every right is ops.
	opsToken, readerToken := tokenOf("ops"), tokenOf("reader")
	for _, res := range [][]string{{"--topic", "*"}, {"--group", "*"}, {"--cluster"}} {
		cli(append([]string{"acl", "create", "--principal", "User:ops", "--allow", "all"}, res...)...)
	}
	cli("acl", "create", "--principal", "User:reader", "--allow", "read", "--topic", "granted")

	caPEM, err := os.ReadFile(d.File.TLSCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in " + d.File.TLSCA)
	}
	client := func(mech kgo.Opt, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(d.File.KafkaBootstrap),
			kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), mech}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	plainAs := func(user, token string) kgo.Opt {
		return kgo.SASL(plain.Auth{User: user, Pass: token}.AsMechanism())
	}

	// The tokens reach the gateway within a second (metadata stream).
	opsCl := client(plainAs("ops", opsToken))
	testwait.Until(t, 30*time.Second, "the ops token to authenticate on the Kafka listener", func() error {
		return opsCl.Ping(ctx)
	})
	t.Run("ops produces and consumes", func(t *testing.T) {
		for i := range 3 {
			r := &kgo.Record{Topic: "granted", Value: fmt.Appendf(nil, "r%d", i)}
			if err := opsCl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce as ops: %v", err)
			}
		}
		cons := client(plainAs("ops", opsToken), kgo.ConsumeTopics("granted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := pollUntil(t, ctx, cons, 3)
		if string(got[0].Value) != "r0" || got[2].Offset != 2 {
			t.Fatalf("consumed %q at %d ..", got[0].Value, got[0].Offset)
		}
	})

	// A DeleteRecords on a tiered topic moves the tier's start too: the
	// storage node's Kafka listener runs the request in ops's name, and
	// the node calls the tiering service, which answers services only, as
	// itself.
	t.Run("ops deletes records of a tiered topic", func(t *testing.T) {
		cli("topic", "create", "tiered", "-p", "1", "-r", "1", "-c", "remote.storage.enable=true")
		for i := range 5 {
			if err := opsCl.ProduceSync(ctx, &kgo.Record{Topic: "tiered", Value: fmt.Appendf(nil, "t%d", i)}).FirstErr(); err != nil {
				t.Fatalf("produce as ops: %v", err)
			}
		}
		adm := kadm.NewClient(opsCl)
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "tiered", Partition: 0, At: 2})
		resp, err := adm.DeleteRecords(ctx, offs)
		if err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		if r, _ := resp.Lookup("tiered", 0); r.Err != nil || r.LowWatermark != 2 {
			t.Fatalf("DeleteRecords before 2 of a tiered topic as ops: low watermark %d, %v; want 2", r.LowWatermark, r.Err)
		}
	})

	t.Run("reader sees and reads one topic, may not produce", func(t *testing.T) {
		for _, mech := range []kgo.Opt{plainAs("reader", readerToken), kgo.SASL(oauth.Auth{Token: readerToken}.AsMechanism())} {
			cl := client(mech)
			var topics []string
			testwait.Until(t, 30*time.Second, "the reader's token and grant to apply", func() error {
				md, err := kadm.NewClient(cl).Metadata(ctx)
				if err != nil {
					return err
				}
				topics = md.Topics.Names()
				if !slices.Equal(topics, []string{"granted"}) {
					return fmt.Errorf("metadata lists %v", topics)
				}
				return nil
			})
			for _, topic := range []string{"granted", "hidden"} {
				err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("nope")}).FirstErr()
				if !errors.Is(err, kerr.TopicAuthorizationFailed) {
					t.Fatalf("reader's produce to %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
				}
			}
		}
		cons := client(plainAs("reader", readerToken), kgo.ConsumeTopics("granted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if got := pollUntil(t, ctx, cons, 3); len(got) != 3 {
			t.Fatalf("reader consumed %d records, want ops's 3", len(got))
		}
		// Read lets it list the producers of granted (ops's); deleting
		// records needs delete on the topic.
		adm := kadm.NewClient(client(plainAs("reader", readerToken)))
		ps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"granted": {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		if dp := ps["granted"].Partitions[0]; dp.Err != nil || len(dp.ActiveProducers) != 1 {
			t.Fatalf("reader's DescribeProducers of granted/0: %+v %v, want ops's producer", dp.ActiveProducers, dp.Err)
		}
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "granted", Partition: 0, At: 1, LeaderEpoch: -1})
		dr, err := adm.DeleteRecords(ctx, os)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := dr.Lookup("granted", 0); !errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("reader's DeleteRecords on granted: %v, want TOPIC_AUTHORIZATION_FAILED", r.Err)
		}
	})

	t.Run("reader's group needs read on the group", func(t *testing.T) {
		denied := client(plainAs("reader", readerToken), kgo.ConsumeTopics("granted"), kgo.ConsumerGroup("ungranted"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		for {
			fs := denied.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatal("no GROUP_AUTHORIZATION_FAILED before the deadline")
			}
			if err := fs.Err0(); errors.Is(err, kerr.GroupAuthorizationFailed) {
				break
			} else if len(fs.Records()) > 0 {
				t.Fatalf("group ungranted consumed %d records", len(fs.Records()))
			}
		}
		denied.Close()
		cli("acl", "create", "--principal", "User:reader", "--allow", "read", "--group", "readers")
		var cons *kgo.Client
		testwait.Until(t, 30*time.Second, "the group grant to apply", func() error {
			if cons != nil {
				cons.Close()
			}
			cons = client(plainAs("reader", readerToken), kgo.ConsumeTopics("granted"), kgo.ConsumerGroup("readers"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			fs := cons.PollFetches(pctx)
			if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			if n := len(fs.Records()); n == 0 {
				return errors.New("no records yet")
			}
			return nil
		})
		if err := cons.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit as the reader: %v", err)
		}
	})

	// Kafka's TransactionalId resource: write on the topic is not enough to
	// run a transactional producer, which would fence another application's.
	t.Run("a transactional producer needs write on its transactional id", func(t *testing.T) {
		// A topic of its own: the later subtests count granted's records.
		cli("topic", "create", "txn-granted", "-p", "1", "-r", "1")
		writerToken := tokenOf("writer")
		cli("acl", "create", "--principal", "User:writer", "--allow", "write", "--topic", "txn-granted")
		attempt := func() error {
			tx := client(plainAs("writer", writerToken), kgo.TransactionalID("tx-writer"), kgo.DefaultProduceTopic("txn-granted"))
			defer tx.Close()
			if err := tx.BeginTransaction(); err != nil {
				return err
			}
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("in a transaction")}).FirstErr(); err != nil {
				return err
			}
			return tx.EndTransaction(ctx, kgo.TryCommit)
		}
		// Until the topic grant reaches every service, the refusal may
		// name the topic; once it has, it names the transactional id.
		testwait.Until(t, 30*time.Second, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", func() error {
			if err := attempt(); !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
				return fmt.Errorf("transaction without a grant on its id: %v: %w", err, testwait.ErrNotYet)
			}
			return nil
		})
		cli("acl", "create", "--principal", "User:writer", "--allow", "write", "--transactional-id", "tx-", "--prefixed")
		testwait.Until(t, 30*time.Second, "the transaction to commit once its id is granted", func() error {
			if err := attempt(); err != nil {
				return fmt.Errorf("%v: %w", err, testwait.ErrNotYet)
			}
			return nil
		})
		if out := cli("acl", "list", "--principal", "User:writer"); !strings.Contains(out, "transactional-id") {
			t.Errorf("acl list does not show the transactional id:\n%s", out)
		}
	})

	scramAs := func(m, user, token string) kgo.Opt {
		a := scram.Auth{User: user, Pass: token}
		if m == "SCRAM-SHA-512" {
			return kgo.SASL(a.AsSha512Mechanism())
		}
		return kgo.SASL(a.AsSha256Mechanism())
	}
	t.Run("SCRAM", func(t *testing.T) {
		cli("topic", "create", "scram", "-p", "1", "-r", "1")
		for i, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			// One login without retries first, so a refused mechanism
			// fails at once rather than at the test's deadline.
			if err := client(scramAs(m, "ops", opsToken), kgo.RequestRetries(0)).Ping(ctx); err != nil {
				t.Fatalf("ops's %s login: %v", m, err)
			}
			// ops (allowed everything) produces and consumes.
			cl := client(scramAs(m, "ops", opsToken))
			r := &kgo.Record{Topic: "scram", Value: []byte(m)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce as ops over %s: %v", m, err)
			}
			if r.Offset != int64(i) {
				t.Fatalf("%s: produced at offset %d, want %d", m, r.Offset, i)
			}
			cons := client(scramAs(m, "ops", opsToken), kgo.ConsumeTopics("scram"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if got := pollUntil(t, ctx, cons, i+1); string(got[i].Value) != m {
				t.Fatalf("%s: consumed %q at offset %d", m, got[i].Value, got[i].Offset)
			}

			// The reader's grants apply as over PLAIN.
			reader := client(scramAs(m, "reader", readerToken))
			md, err := kadm.NewClient(reader).Metadata(ctx)
			if err != nil {
				t.Fatalf("reader's Metadata over %s: %v", m, err)
			}
			if topics := md.Topics.Names(); !slices.Equal(topics, []string{"granted"}) {
				t.Fatalf("reader over %s sees %v, want [granted]", m, topics)
			}
			for _, topic := range []string{"granted", "scram"} {
				err := reader.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("nope")}).FirstErr()
				if !errors.Is(err, kerr.TopicAuthorizationFailed) {
					t.Fatalf("reader's produce to %s over %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, m, err)
				}
			}
			rc := client(scramAs(m, "reader", readerToken), kgo.ConsumeTopics("granted"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if got := pollUntil(t, ctx, rc, 3); len(got) != 3 {
				t.Fatalf("reader over %s consumed %d records, want ops's 3", m, len(got))
			}

			// Wrong credentials.
			for name, mech := range map[string]kgo.Opt{
				"another user's token": scramAs(m, "ops", readerToken),
				"unknown token":        scramAs(m, "reader", "strata_"+strings.Repeat("A", 43)),
				"unknown user":         scramAs(m, "nobody", readerToken),
			} {
				err := client(mech, kgo.RequestRetries(0)).Ping(ctx)
				if !errors.Is(err, kerr.SaslAuthenticationFailed) {
					t.Errorf("%s over %s: %v, want SASL_AUTHENTICATION_FAILED", name, m, err)
				}
			}
		}
	})

	t.Run("SCRAM does not reveal users", func(t *testing.T) {
		brokers, err := kadm.NewClient(opsCl).BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		addrs := []string{d.File.KafkaBootstrap}
		for _, b := range brokers.Brokers {
			addrs = append(addrs, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
		}
		testSCRAMDoesNotRevealUsers(ctx, t, addrs, pool, "reader")
	})

	t.Run("wrong credentials fail authentication", func(t *testing.T) {
		for name, mech := range map[string]kgo.Opt{
			"unknown token":       plainAs("reader", "strata_"+strings.Repeat("A", 43)),
			"another user's name": plainAs("ops", readerToken),
		} {
			err := client(mech, kgo.RequestRetries(0)).Ping(ctx)
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", name, err)
			}
		}
		// TLS without SASL or a client certificate: Metadata is refused
		// and the connection closed.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(d.File.KafkaBootstrap), kgo.RequestRetries(0),
			kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := kadm.NewClient(cl).Metadata(pctx); err == nil {
			t.Error("Metadata without authentication answered")
		}
	})

	t.Run("kcat over SCRAM-SHA-256", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatal("kcat is not installed (Debian package kcat; .ci/run installs it)")
		}
		cli("topic", "create", "kcat-scram", "-p", "1", "-r", "1")
		run := func(stdin string, args ...string) string {
			t.Helper()
			kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(kctx, kcat, append([]string{"-b", d.File.KafkaBootstrap, "-X", "ssl.ca.location=" + d.File.TLSCA,
				"-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
				"-X", "sasl.username=ops", "-X", "sasl.password=" + opsToken}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("kcat %s over SCRAM-SHA-256: %v: %s", strings.Join(args, " "), err, errb.String())
			}
			return out.String()
		}
		run("one\ntwo\n", "-P", "-t", "kcat-scram", "-p", "0")
		if out := run("", "-C", "-t", "kcat-scram", "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n"); out != "0 one\n1 two\n" {
			t.Fatalf("kcat -C over SCRAM-SHA-256 read:\n%s", out)
		}
	})

	t.Run("kcat -L over SASL_SSL and SSL", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatal("kcat is not installed (Debian package kcat; .ci/run installs it)")
		}
		tlsDir := filepath.Join(d.Dir, "tls")
		for name, opts := range map[string][]string{
			// ops's token over SASL PLAIN.
			"SASL_SSL": {"-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN",
				"-X", "sasl.username=ops", "-X", "sasl.password=" + opsToken},
			// The admin's client certificate, as the ready block prints.
			"SSL": {"-X", "security.protocol=SSL", "-X", "ssl.certificate.location=" + filepath.Join(tlsDir, "admin.pem"),
				"-X", "ssl.key.location=" + filepath.Join(tlsDir, "admin-key.pem")},
		} {
			kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			args := append([]string{"-b", d.File.KafkaBootstrap, "-L", "-X", "ssl.ca.location=" + d.File.TLSCA}, opts...)
			cmd := exec.CommandContext(kctx, kcat, args...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			cancel()
			if err != nil {
				t.Fatalf("kcat -L over %s: %v: %s", name, err, errb.String())
			}
			// Two brokers: the storage node, and the coordinator, which
			// registered with the controller.
			for _, want := range []string{`topic "granted"`, `topic "hidden"`, "2 brokers", "broker 1 at"} {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("kcat -L over %s lacks %q:\n%s", name, want, out.String())
				}
			}
		}
	})
}

// pollUntil polls cl until it has want records.
func pollUntil(t *testing.T, ctx context.Context, cl *kgo.Client, want int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records before the deadline, want %d", len(out), want)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("fetch %s-%d: %v", topic, p, err)
			}
		})
		out = append(out, fs.Records()...)
	}
	return out
}
