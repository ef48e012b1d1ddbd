package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// saramaGroupHandler records every message its session delivers and marks
// it consumed.
type saramaGroupHandler struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *saramaGroupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaGroupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaGroupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *saramaGroupHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// The Kafka clients besides franz-go and kcat, run by TestKafkaClients
// (kafka_test.go) on its cluster, each on its own topic and group.

// kafkaTopicReady waits until every partition of topic answers ListOffsets
// at its leader through the Kafka listener: a topic just created is in the
// metadata before its leaders have opened it, and clients that give up
// after a few retries (sarama's SyncProducer retries 3 times, 100 ms
// apart) would fail on a loaded machine.
func kafkaTopicReady(t *testing.T, d *harness.Dev, topic string) {
	t.Helper()
	adm := kadm.NewClient(kafkaClient(t, d))
	ctx := harness.Deadline(t, 2*time.Minute)
	testwait.Until(t, 2*time.Minute, "every partition of "+topic+" to answer at its leader", func() error {
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		if err := offs.Error(); err != nil {
			return err
		}
		if len(offs[topic]) == 0 {
			return fmt.Errorf("no partition of %s listed", topic)
		}
		return nil
	})
}

// kafkaSarama produces idempotently with IBM/sarama (acks=all) and reads
// everything back in a sarama consumer group of two.
func kafkaSarama(t *testing.T, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "sarama", "-p", "4", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	kafkaTopicReady(t, d, "sarama")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	prod, err := sarama.NewSyncProducer([]string{d.File.KafkaBootstrap}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 200
	for i := range n {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "sarama", Key: sarama.StringEncoder(fmt.Sprint(i % 9)), Value: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
			t.Fatalf("sarama produce %d: %v", i, err)
		}
	}
	h := &saramaGroupHandler{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		g, err := sarama.NewConsumerGroup([]string{d.File.KafkaBootstrap}, "sarama-group", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := g.Consume(ctx, []string{"sarama"}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) && ctx.Err() == nil {
					t.Logf("sarama consume: %v", err)
				}
			}
		}()
	}
	testwait.Until(t, 2*time.Minute, "the sarama group to read every record", func() error {
		if c := h.count(); c < n {
			return fmt.Errorf("%d of %d distinct records read", c, n)
		}
		return nil
	})
	cancel()
	wg.Wait()
}

// kafkaKafkaGo writes with segmentio/kafka-go (acks=all) and reads
// everything back with a kafka-go group reader.
func kafkaKafkaGo(t *testing.T, d *harness.Dev, cli func(stdin string, args ...string) (string, error)) {
	if _, err := cli("", "topic", "create", "kgo-seg", "-p", "3", "-r", "3"); err != nil {
		t.Fatal(err)
	}
	kafkaTopicReady(t, d, "kgo-seg")
	ctx := harness.Deadline(t, 3*time.Minute)
	w := &kafkago.Writer{Addr: kafkago.TCP(d.File.KafkaBootstrap), Topic: "kgo-seg", RequiredAcks: kafkago.RequireAll, Balancer: &kafkago.Hash{}}
	defer w.Close()
	const n = 200
	var msgs []kafkago.Message
	for i := range n {
		msgs = append(msgs, kafkago.Message{Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i)), Headers: []kafkago.Header{{Key: "h", Value: []byte("v")}}})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go write: %v", err)
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{d.File.KafkaBootstrap}, GroupID: "seg-group", Topic: "kgo-seg",
		StartOffset: kafkago.FirstOffset, MaxWait: 500 * time.Millisecond, CommitInterval: 500 * time.Millisecond})
	defer r.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go read after %d records: %v", len(seen), err)
		}
		if len(m.Headers) != 1 || string(m.Headers[0].Value) != "v" {
			t.Fatalf("headers %v", m.Headers)
		}
		seen[string(m.Value)] = true
	}
}
