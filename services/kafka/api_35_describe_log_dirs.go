package kafka

import (
	"context"
	"sort"
	"syscall"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
)

// DescribeLogDirs (35), v0–4: the log directory of the broker asked and
// the replicas in it, from the storage node's DescribeLog. Kafka's admin
// tools (kafka-log-dirs.sh, kadm's DescribeBrokerLogDirs) send it to each
// broker Metadata lists.
//
//   - A storage node has one directory, its --data-dir: each replica it
//     holds, leader or follower, with the bytes of its segments on local
//     disk (tiered bytes are not in the directory, as Kafka counts
//     remote log segments nowhere here) and an offset lag of
//     max(high watermark - log end, 0), as Kafka's for a current
//     replica. v4's total and usable bytes are the file system's.
//   - The gateway's and the coordinator's listeners hold no log: they
//     answer no directories, as a broker with none would.
//   - Null topics ask for every replica; named partitions the node does
//     not hold are left out, as Kafka leaves them out.
//   - ACL: describe on the cluster; refused, the answer is
//     CLUSTER_AUTHORIZATION_FAILED (v3+ in the top-level code, before
//     that in a directory entry with no name, as Kafka does).
func (b *Bridge) describeLogDirsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeLogDirs, MinVersion: 0, MaxVersion: 4, Handle: handler(b.describeLogDirs)}
}

func (b *Bridge) describeLogDirs(ctx context.Context, version int16, req *kmsg.DescribeLogDirsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeLogDirsResponse()
	if err := b.authorizeCluster(ctx, acl.Describe); err != nil {
		code := kafkaCode(err, adminPlane)
		if version >= 3 {
			resp.ErrorCode = code
		} else {
			d := kmsg.NewDescribeLogDirsResponseDir()
			d.ErrorCode = code
			resp.Dirs = append(resp.Dirs, d)
		}
		return resp, nil
	}
	if b.cfg.Storage == nil || b.cfg.LogDir == "" {
		return resp, nil
	}
	sreq := &storagev1.DescribeLogRequest{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			sreq.Partitions = append(sreq.Partitions, &commonv1.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = b.cfg.LogDir
	if req.Topics != nil && len(sreq.Partitions) == 0 {
		// Topics named with no partitions: nothing to describe.
		return withDiskSpace(resp, dir, version), nil
	}
	out, err := b.cfg.Storage.DescribeLog(ctx, connect.NewRequest(sreq))
	if err != nil {
		dir.ErrorCode = kafkaCode(err, adminPlane)
		resp.Dirs = append(resp.Dirs, dir)
		return resp, nil
	}
	byTopic := map[string][]kmsg.DescribeLogDirsResponseDirTopicPartition{}
	for _, p := range out.Msg.GetPartitions() {
		if p.GetError() != nil {
			continue // a partition this node holds no replica of
		}
		rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
		rp.Partition, rp.Size = p.GetPartition(), p.GetLocalSizeBytes()
		rp.OffsetLag = max(p.GetHighWatermark()-p.GetLogEndOffset(), 0)
		byTopic[p.GetTopic()] = append(byTopic[p.GetTopic()], rp)
	}
	names := make([]string, 0, len(byTopic))
	for t := range byTopic {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		rt := kmsg.NewDescribeLogDirsResponseDirTopic()
		rt.Topic, rt.Partitions = t, byTopic[t]
		dir.Topics = append(dir.Topics, rt)
	}
	return withDiskSpace(resp, dir, version), nil
}

// withDiskSpace adds dir to resp with, from v4, its file system's total
// and usable bytes (-1 when they cannot be read).
func withDiskSpace(resp *kmsg.DescribeLogDirsResponse, dir kmsg.DescribeLogDirsResponseDir, version int16) *kmsg.DescribeLogDirsResponse {
	if version >= 4 {
		var st syscall.Statfs_t
		if syscall.Statfs(dir.Dir, &st) == nil {
			dir.TotalBytes = int64(st.Blocks) * st.Bsize
			dir.UsableBytes = int64(st.Bavail) * st.Bsize
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}
