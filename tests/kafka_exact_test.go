package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// testKafkaExactAnswers checks, against the Kafka listeners of a real
// strata dev with raw kmsg requests, the answers docs/kafka.md ("Produce,
// Fetch and ListOffsets answers") says match Kafka's: ListOffsets by
// timestamp finds the record, not its batch, and answers -1/-1 past the
// last one; latest carries the leader epoch; Fetch keeps to max_bytes
// (KIP-74); acks outside -1, 0, 1 are INVALID_REQUIRED_ACKS; a batch whose
// records do not add up is INVALID_RECORD; a failed acks=0 produce closes
// the connection.
//
// It runs as a subtest of TestKafkaClients, on that test's cluster: it
// only reads and writes topics of its own. It stays a real-process test
// because it checks the door and the owner together (the Kafka listener's
// answers over a real storage node's handlers and the gateway's
// bootstrap listener); each half's logic is tested in-process too
// (services/kafka exact_test.go, services/storage/internal/server).
func testKafkaExactAnswers(t *testing.T, ctx context.Context, d *harness.Dev) {
	cl := kafkaClient(t, d)
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 4, 1, nil, "exact"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	// Two partitions with the same leader, for one Fetch over both.
	var leader int32 = -1
	var pa, pb int32 = -1, -1
	testwait.Until(t, 60*time.Second, "the partitions' leaders", func() error {
		md, err := adm.Metadata(ctx, "exact")
		if err != nil {
			return err
		}
		by := map[int32][]int32{}
		for _, p := range md.Topics["exact"].Partitions {
			if p.Leader < 0 {
				return errors.New("a partition has no leader yet")
			}
			by[p.Leader] = append(by[p.Leader], p.Partition)
		}
		for l, ps := range by {
			if len(ps) >= 2 {
				leader, pa, pb = l, ps[0], ps[1]
				return nil
			}
		}
		return errors.New("no two partitions share a leader")
	})
	broker := cl.Broker(int(leader))

	produce := func(acks int16, partition int32, batch []byte) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		resp, err := exactProduceRequest(acks, partition, batch).RequestWith(ctx, broker)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	build := func(stamps []int64, value []byte) []byte {
		t.Helper()
		var recs []recordbatch.Record
		for _, ts := range stamps {
			recs = append(recs, recordbatch.Record{Value: value, Timestamp: ts})
		}
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// list asks the leader for partition's offset at ts (-1: latest).
	list := func(partition int32, ts int64) (kmsg.ListOffsetsResponseTopicPartition, error) {
		req := kmsg.NewPtrListOffsetsRequest() // ReplicaID -1: a consumer
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "exact"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, ts, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, broker)
		if err != nil {
			return kmsg.ListOffsetsResponseTopicPartition{}, err
		}
		return resp.Topics[0].Partitions[0], nil
	}

	t0 := time.Now().Add(-time.Minute).UnixMilli()
	// The leader learns of the new topic from its metadata stream: until
	// then it answers UNKNOWN_TOPIC_OR_PARTITION, and nothing is appended.
	for _, p := range []int32{pa, pb} {
		testwait.Until(t, 60*time.Second, "the leader to host the partition", func() error {
			lp, err := list(p, -1)
			if err != nil {
				return err
			}
			if c := lp.ErrorCode; c != 0 {
				return fmt.Errorf("partition %d: code %d", p, c)
			}
			return nil
		})
	}
	if rp := produce(-1, pa, build([]int64{t0, t0 + 10, t0 + 20}, []byte("v"))); rp.ErrorCode != 0 || rp.BaseOffset != 0 {
		t.Fatalf("produce: code %d base %d", rp.ErrorCode, rp.BaseOffset)
	}

	t.Run("list offsets", func(t *testing.T) {
		listA := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
			t.Helper()
			p, err := list(pa, ts)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		if p := listA(t0 + 5); p.ErrorCode != 0 || p.Offset != 1 || p.Timestamp != t0+10 {
			t.Errorf("by timestamp inside the batch: code %d offset %d timestamp %d, want offset 1 timestamp %d", p.ErrorCode, p.Offset, p.Timestamp, t0+10)
		}
		if p := listA(t0 + 100); p.ErrorCode != 0 || p.Offset != -1 || p.Timestamp != -1 {
			t.Errorf("past the last record: code %d offset %d timestamp %d, want -1 and -1", p.ErrorCode, p.Offset, p.Timestamp)
		}
		if p := listA(-1); p.ErrorCode != 0 || p.Offset != 3 || p.LeaderEpoch < 0 {
			t.Errorf("latest: code %d offset %d leader epoch %d, want 3 and the leader's epoch", p.ErrorCode, p.Offset, p.LeaderEpoch)
		}
	})

	t.Run("fetch max bytes", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 64<<10)
		for _, p := range []int32{pa, pb} {
			if rp := produce(-1, p, build([]int64{t0 + 30}, big)); rp.ErrorCode != 0 {
				t.Fatalf("produce to %d: code %d", p, rp.ErrorCode)
			}
		}
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 1, 1000
		req.SessionEpoch = -1 // no session
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "exact"
		for _, p := range []struct {
			partition int32
			offset    int64
		}{{pb, 0}, {pa, 3}} {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = p.partition, p.offset, 1<<20, -1
			rt.Partitions = append(rt.Partitions, fp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, broker)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int32]int{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("partition %d: code %d", rp.Partition, rp.ErrorCode)
				}
				got[rp.Partition] = len(rp.RecordBatches)
			}
		}
		if got[pb] < 64<<10 || got[pa] != 0 {
			t.Fatalf("fetch of 1000 bytes: %d bytes of the first partition and %d of the second, want its one batch and none", got[pb], got[pa])
		}
	})

	t.Run("produce refusals", func(t *testing.T) {
		// franz-go sets a Produce's acks to its client's, so acks=2 goes
		// over a connection of the test's own.
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var addr string
		for _, b := range md.Brokers {
			if b.NodeID == leader {
				addr = net.JoinHostPort(b.Host, fmt.Sprint(b.Port))
			}
		}
		conn := rawConn(t, addr)
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 7
		if err := resp.ReadFrom(rawProduce(t, conn, 2, pa, build([]int64{t0}, []byte("v")))); err != nil {
			t.Fatal(err)
		}
		if c := resp.Topics[0].Partitions[0].ErrorCode; c != 21 {
			t.Errorf("acks=2: code %d, want INVALID_REQUIRED_ACKS (21)", c)
		}
		if rp := produce(-1, pa, batchtest.Poisons(t)[0].Batch); rp.ErrorCode != 87 {
			t.Errorf("a batch whose record count is wrong: code %d, want INVALID_RECORD (87)", rp.ErrorCode)
		}
	})

	t.Run("acks=0 failure closes the connection", func(t *testing.T) {
		// The bootstrap (the gateway's listener) leads no partition: an
		// acks=0 produce to it fails, and Kafka closes the connection.
		conn := rawConn(t, d.File.KafkaBootstrap)
		if body := rawProduce(t, conn, 0, pa, build([]int64{t0}, []byte("v"))); body != nil {
			t.Fatalf("answered %d bytes to an acks=0 produce", len(body))
		}
	})
}

// exactProduceRequest is a Produce of one batch to partition of "exact",
// with a 10 s timeout.
func exactProduceRequest(acks int16, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "exact"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawProduce sends a Produce v7 of one batch to partition of "exact" on
// conn and returns the answer's body, or nil when the connection is
// closed without one; it fails the test when the connection stays open
// without an answer for 30 s.
func rawProduce(t *testing.T, conn net.Conn, acks int16, partition int32, batch []byte) []byte {
	t.Helper()
	req := exactProduceRequest(acks, partition, batch)
	req.Version = 7
	// The size, request header v1 (key, version, correlation id, client
	// id) and body.
	msg := kmsg.NewRequestFormatter(kmsg.FormatterClientID("exact")).AppendRequest(nil, req, 1)
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	_, err := io.ReadFull(conn, size[:])
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatal("no answer and the connection stayed open")
	case errors.Is(err, io.EOF) || (err != nil && strings.Contains(err.Error(), "reset")):
		return nil
	case err != nil:
		t.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, frame); err != nil {
		t.Fatal(err)
	}
	return frame[4:] // after the correlation id
}
