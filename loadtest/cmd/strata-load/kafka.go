package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/strata-mq/strata/client"
)

// The Kafka path (--protocol kafka): the same workloads with franz-go
// at the cluster's Kafka listener instead of Strata's Go client through
// Connect. Producers keep franz-go's defaults (idempotent under acks=all,
// murmur2 key partitioning, which maps keys as the Go client does) with
// --linger and no compression, as a Kafka user's service would; topics
// are still created, listed and deleted through the gateway.

// loadProducer is what a produce run sends through.
type loadProducer interface {
	// produce sends one record; done runs once with its outcome.
	produce(ctx context.Context, topic string, key, value []byte, done func(error))
	// produceSync sends recs and waits for every outcome.
	produceSync(ctx context.Context, recs []*client.Record) error
	// flush sends what is buffered without waiting for the linger and
	// waits for every outcome.
	flush(ctx context.Context) error
	close()
}

// goProducer is Strata's Go client.
type goProducer struct{ p *client.Producer }

func (g goProducer) produce(ctx context.Context, topic string, key, value []byte, done func(error)) {
	g.p.Produce(ctx, &client.Record{Topic: topic, Key: key, Value: value}, func(_ *client.Record, err error) { done(err) })
}

func (g goProducer) produceSync(ctx context.Context, recs []*client.Record) error {
	return g.p.ProduceSync(ctx, recs...)
}

func (g goProducer) flush(ctx context.Context) error { return g.p.Flush(ctx) }

func (g goProducer) close() { g.p.Close() }

// kafkaConfig reaches the Kafka listener: its bootstrap address, and TLS
// and SASL OAUTHBEARER (the token) when the cluster is secure.
type kafkaConfig struct {
	bootstrap string
	tls       *tls.Config // nil: plaintext
	token     string
}

func (k kafkaConfig) opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(k.bootstrap)}
	if k.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(k.tls.Clone()))
	}
	if k.token != "" {
		opts = append(opts, kgo.SASL(oauth.Auth{Token: k.token}.AsMechanism()))
	}
	return opts
}

// kafkaProducer is franz-go.
type kafkaProducer struct{ cl *kgo.Client }

func (r *runner) newKafkaProducer(w workload, linger time.Duration) (*kafkaProducer, error) {
	opts := append(r.kafka.opts(),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// Room for the closed loop's window and the warm-up; franz-go
		// blocks Produce past its buffer.
		kgo.MaxBufferedRecords(max(10000, 2*r.set.inflight)),
	)
	switch w.Durability.Acks {
	case client.AcksAll:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case client.AcksLeader:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return &kafkaProducer{cl: cl}, nil
}

func (k *kafkaProducer) produce(ctx context.Context, topic string, key, value []byte, done func(error)) {
	k.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}, func(_ *kgo.Record, err error) { done(err) })
}

func (k *kafkaProducer) produceSync(ctx context.Context, recs []*client.Record) error {
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value}
	}
	return k.cl.ProduceSync(ctx, krs...).FirstErr()
}

func (k *kafkaProducer) flush(ctx context.Context) error { return k.cl.Flush(ctx) }

func (k *kafkaProducer) close() { k.cl.Close() }

// kafkaReader is a franz-go consumer behind the poller interface: of
// given partitions from their start, or a member of a group.
type kafkaReader struct {
	cl *kgo.Client
}

func (r *runner) newKafkaReader(topic string, parts []int32) (*kafkaReader, error) {
	start := map[int32]kgo.Offset{}
	for _, p := range parts {
		start[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(r.kafka.opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))...)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	return &kafkaReader{cl: cl}, nil
}

// Poll returns the records of one franz-go poll, or its first error when
// it brought none.
func (k *kafkaReader) Poll(ctx context.Context) ([]*client.Record, error) {
	fs := k.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs := make([]*client.Record, 0, fs.NumRecords())
	fs.EachRecord(func(r *kgo.Record) {
		recs = append(recs, &client.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
	})
	if len(recs) == 0 {
		var first error
		fs.EachError(func(topic string, p int32, err error) {
			if first == nil {
				first = fmt.Errorf("%s/%d: %w", topic, p, err)
			}
		})
		if errors.Is(first, kgo.ErrClientClosed) {
			return nil, context.Canceled
		}
		return nil, first
	}
	return recs, nil
}

func (k *kafkaReader) Close() { k.cl.Close() }

// kafkaGroup is a franz-go consumer group formed on an empty topic, its
// fetches paused until a consume run resumes them (the shape of group:
// see there). owned tracks what each member was assigned.
type kafkaGroup struct {
	topic   string
	members []*kafkaReader
	mu      sync.Mutex
	owned   []map[int32]bool
}

func (r *runner) newKafkaGroup(name, topic string, members int) (*kafkaGroup, error) {
	g := &kafkaGroup{topic: topic, owned: make([]map[int32]bool, members)}
	for i := range members {
		g.owned[i] = map[int32]bool{}
		cl, err := kgo.NewClient(append(r.kafka.opts(),
			kgo.ConsumerGroup(name), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.note(i, m[topic], true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.note(i, m[topic], false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.note(i, m[topic], false) }),
		)...)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("kafka group member: %w", err)
		}
		cl.PauseFetchTopics(topic)
		g.members = append(g.members, &kafkaReader{cl: cl})
	}
	return g, nil
}

func (g *kafkaGroup) note(member int, parts []int32, assigned bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		if assigned {
			g.owned[member][p] = true
		} else {
			delete(g.owned[member], p)
		}
	}
}

// spread reports whether the members own every partition exactly once,
// none of them empty-handed unless there are fewer partitions than
// members (as spread does for Strata's groups).
func (g *kafkaGroup) spread(partitions int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[int32]bool{}
	for _, own := range g.owned {
		if len(own) == 0 && partitions >= len(g.owned) {
			return false
		}
		for p := range own {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == partitions
}

func (g *kafkaGroup) resume() {
	for _, m := range g.members {
		m.cl.ResumeFetchTopics(g.topic)
	}
}

func (g *kafkaGroup) close() {
	for _, m := range g.members {
		m.Close()
	}
}
