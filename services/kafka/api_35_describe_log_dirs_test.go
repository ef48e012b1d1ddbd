package kafka

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
)

// describeLogStorage answers DescribeLog as a node holding orders-0
// (leader), orders-2 (a follower behind the high watermark) and audit-1.
type describeLogStorage struct {
	storagev1connect.StorageServiceClient
	asked *storagev1.DescribeLogRequest
}

func (f *describeLogStorage) DescribeLog(_ context.Context, req *connect.Request[storagev1.DescribeLogRequest]) (*connect.Response[storagev1.DescribeLogResponse], error) {
	f.asked = req.Msg
	held := []*storagev1.DescribeLogPartitionResult{
		{Topic: "audit", Partition: 1, LogEndOffset: 5, HighWatermark: 5, LocalSizeBytes: 300},
		{Topic: "orders", Partition: 0, Leader: true, LogEndOffset: 90, HighWatermark: 90, LocalSizeBytes: 9000},
		{Topic: "orders", Partition: 2, LogEndOffset: 40, HighWatermark: 46, LocalSizeBytes: 4000},
	}
	out := &storagev1.DescribeLogResponse{NodeId: 1}
	if len(req.Msg.GetPartitions()) == 0 {
		out.Partitions = held
		return connect.NewResponse(out), nil
	}
	for _, p := range req.Msg.GetPartitions() {
		r := &storagev1.DescribeLogPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition(),
			Error: &commonv1.ErrorDetail{Code: commonv1.Code_CODE_NOT_FOUND}}
		for _, h := range held {
			if h.GetTopic() == p.GetTopic() && h.GetPartition() == p.GetPartition() {
				r = h
			}
		}
		out.Partitions = append(out.Partitions, r)
	}
	return connect.NewResponse(out), nil
}

func TestDescribeLogDirs(t *testing.T) {
	dir := t.TempDir()
	st := &describeLogStorage{}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: st, LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Every replica, by topic, with its size and lag; v4's disk space.
	resp, err := b.describeLogDirs(ctx, 4, kmsg.NewPtrDescribeLogDirsRequest())
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.DescribeLogDirsResponse)
	if r.ErrorCode != 0 || len(r.Dirs) != 1 {
		t.Fatalf("answer: code %d, %d dirs; want one directory", r.ErrorCode, len(r.Dirs))
	}
	d := r.Dirs[0]
	if d.Dir != dir || d.ErrorCode != 0 || d.TotalBytes <= 0 || d.UsableBytes < 0 || d.UsableBytes > d.TotalBytes {
		t.Fatalf("directory %q code %d total %d usable %d; want %q with the file system's space", d.Dir, d.ErrorCode, d.TotalBytes, d.UsableBytes, dir)
	}
	type row struct {
		topic           string
		partition       int32
		size, offsetLag int64
	}
	var got []row
	for _, tp := range d.Topics {
		for _, p := range tp.Partitions {
			got = append(got, row{tp.Topic, p.Partition, p.Size, p.OffsetLag})
		}
	}
	want := []row{{"audit", 1, 300, 0}, {"orders", 0, 9000, 0}, {"orders", 2, 4000, 6}}
	if len(got) != len(want) {
		t.Fatalf("replicas %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("replicas %v, want %v", got, want)
		}
	}

	// Named partitions: only those held; v0 has no disk space.
	req := kmsg.NewPtrDescribeLogDirsRequest()
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic, rt.Partitions = "orders", []int32{2, 7}
	req.Topics = append(req.Topics, rt)
	resp, err = b.describeLogDirs(ctx, 0, req)
	if err != nil {
		t.Fatal(err)
	}
	d = resp.(*kmsg.DescribeLogDirsResponse).Dirs[0]
	if len(st.asked.GetPartitions()) != 2 || len(d.Topics) != 1 || len(d.Topics[0].Partitions) != 1 || d.Topics[0].Partitions[0].Partition != 2 || d.TotalBytes != -1 {
		t.Fatalf("orders 2 and 7 asked %v: answered %+v; want orders-2 alone, no disk space at v0", st.asked.GetPartitions(), d)
	}

	// The gateway's and coordinator's listeners hold no log.
	gw, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = gw.describeLogDirs(ctx, 4, kmsg.NewPtrDescribeLogDirsRequest())
	if err != nil || len(resp.(*kmsg.DescribeLogDirsResponse).Dirs) != 0 {
		t.Fatalf("a listener without storage: %v %+v, want no directories", err, resp)
	}
}

// Describe on the cluster is needed: refused, v3+ answers
// CLUSTER_AUTHORIZATION_FAILED at the top, older versions in a directory
// entry, and the node is never asked.
func TestDescribeLogDirsNeedsDescribeOnTheCluster(t *testing.T) {
	g, ctx := readerGuard(t)
	st := &describeLogStorage{}
	b, err := New(Config{Gateway: fakeGateway{}, HTTPClient: http.DefaultClient, Storage: st, LogDir: t.TempDir(), Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.describeLogDirs(ctx, 3, kmsg.NewPtrDescribeLogDirsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*kmsg.DescribeLogDirsResponse); r.ErrorCode != 31 || len(r.Dirs) != 0 {
		t.Fatalf("v3 refused: code %d, %d dirs; want 31 (CLUSTER_AUTHORIZATION_FAILED) and none", r.ErrorCode, len(r.Dirs))
	}
	resp, err = b.describeLogDirs(ctx, 1, kmsg.NewPtrDescribeLogDirsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*kmsg.DescribeLogDirsResponse); len(r.Dirs) != 1 || r.Dirs[0].ErrorCode != 31 {
		t.Fatalf("v1 refused: %+v, want one directory entry with code 31", r)
	}
	if st.asked != nil {
		t.Fatal("the storage node was asked for a refused request")
	}
}
