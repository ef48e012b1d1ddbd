package kafkawire

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Error responses. A refused request is answered with the error in every
// place its response's version can carry one: the top-level error code
// when that version has it, else the per-item codes of what the request
// names (topics, partitions, groups, config resources). When the version
// has no such place (Metadata before v13 asking for every topic, a
// Produce with acks=0 that expects no answer, an API with no error field
// at all), there is no answer: the connection is closed, since any
// response would read as a success.

// ErrorResponse is the response to req (decoded, at req.Version) with code
// in every error field, or nil when none carries it.
func ErrorResponse(req *Request, code int16) kmsg.Response {
	return ErrorResponseFor(req.Version, req.Body, code)
}

// ErrorResponseFor is ErrorResponse for a request body at version.
func ErrorResponseFor(version int16, body kmsg.Request, code int16) kmsg.Response {
	if body == nil || code == 0 {
		return nil
	}
	resp := body.ResponseKind()
	resp.SetVersion(version)
	if topLevelErrorAt(resp, version) {
		SetErrorCode(resp, code)
		return resp
	}
	if !fillItemErrors(version, body, resp, code) {
		return nil
	}
	return resp
}

// topLevelErrorAt reports whether resp's type carries its top-level
// ErrorCode field at version: kmsg's structs have every version's fields,
// so the field is present in Go at versions whose wire format lacks it.
// It is carried when setting it changes the encoding.
func topLevelErrorAt(resp kmsg.Response, version int16) bool {
	if version < 0 || version > resp.MaxVersion() {
		return false
	}
	probe := kmsg.Key(resp.Key()).Response()
	probe.SetVersion(version)
	if !SetErrorCode(probe, 0) {
		return false
	}
	zero := probe.AppendTo(nil)
	SetErrorCode(probe, 1)
	return !bytes.Equal(zero, probe.AppendTo(nil))
}

// fillItemErrors sets code on one response item per item of req, for the
// APIs whose errors are per topic, partition, group or resource, and
// reports whether at least one item carries it.
func fillItemErrors(version int16, req kmsg.Request, resp kmsg.Response, code int16) bool {
	n := 0
	switch q := req.(type) {
	case *kmsg.ProduceRequest:
		if q.Acks == 0 {
			return false // the client reads no answer
		}
		r := resp.(*kmsg.ProduceResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, code, -1
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.FetchRequest:
		r := resp.(*kmsg.FetchResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rp.RecordBatches = []byte{}
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.ListOffsetsRequest:
		r := resp.(*kmsg.ListOffsetsResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Offset, rp.Timestamp = p.Partition, code, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.MetadataRequest:
		// Only named topics can carry it; asking for every topic (nil,
		// or empty at v0) or for the brokers alone has no place for it.
		r := resp.(*kmsg.MetadataResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic, rt.TopicID, rt.ErrorCode = t.Topic, t.TopicID, code
			r.Topics = append(r.Topics, rt)
			n++
		}
	case *kmsg.OffsetCommitRequest:
		r := resp.(*kmsg.OffsetCommitResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.OffsetFetchRequest:
		// Before v2 (no top-level code), per partition; from v8, per
		// group.
		r := resp.(*kmsg.OffsetFetchResponse)
		for _, g := range q.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			r.Groups = append(r.Groups, rg)
			n++
		}
		for _, t := range q.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Offset = p, code, -1
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.FindCoordinatorRequest:
		// v4+: one answer per key.
		r := resp.(*kmsg.FindCoordinatorResponse)
		for _, k := range q.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.ErrorCode = k, -1, code
			r.Coordinators = append(r.Coordinators, c)
			n++
		}
	case *kmsg.DescribeGroupsRequest:
		r := resp.(*kmsg.DescribeGroupsResponse)
		for _, g := range q.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, code
			r.Groups = append(r.Groups, rg)
			n++
		}
	case *kmsg.DeleteGroupsRequest:
		r := resp.(*kmsg.DeleteGroupsResponse)
		for _, g := range q.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, code
			r.Groups = append(r.Groups, rg)
			n++
		}
	case *kmsg.CreateTopicsRequest:
		r := resp.(*kmsg.CreateTopicsResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode, rt.NumPartitions, rt.ReplicationFactor = t.Topic, code, -1, -1
			r.Topics = append(r.Topics, rt)
			n++
		}
	case *kmsg.DeleteTopicsRequest:
		r := resp.(*kmsg.DeleteTopicsResponse)
		for _, name := range q.TopicNames {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.ErrorCode = &name, code
			r.Topics = append(r.Topics, rt)
			n++
		}
		for _, t := range q.Topics {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.TopicID, rt.ErrorCode = t.Topic, t.TopicID, code
			r.Topics = append(r.Topics, rt)
			n++
		}
	case *kmsg.CreatePartitionsRequest:
		r := resp.(*kmsg.CreatePartitionsResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = t.Topic, code
			r.Topics = append(r.Topics, rt)
			n++
		}
	case *kmsg.DescribeConfigsRequest:
		r := resp.(*kmsg.DescribeConfigsResponse)
		for _, c := range q.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = c.ResourceType, c.ResourceName, code
			r.Resources = append(r.Resources, rr)
			n++
		}
	case *kmsg.AlterConfigsRequest:
		r := resp.(*kmsg.AlterConfigsResponse)
		for _, c := range q.Resources {
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = c.ResourceType, c.ResourceName, code
			r.Resources = append(r.Resources, rr)
			n++
		}
	case *kmsg.IncrementalAlterConfigsRequest:
		r := resp.(*kmsg.IncrementalAlterConfigsResponse)
		for _, c := range q.Resources {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = c.ResourceType, c.ResourceName, code
			r.Resources = append(r.Resources, rr)
			n++
		}
	case *kmsg.OffsetForLeaderEpochRequest:
		r := resp.(*kmsg.OffsetForLeaderEpochResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p.Partition, code, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.DeleteRecordsRequest:
		r := resp.(*kmsg.DeleteRecordsResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDeleteRecordsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LowWatermark = p.Partition, code, -1
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.DescribeProducersRequest:
		r := resp.(*kmsg.DescribeProducersResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewDescribeProducersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeProducersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.DescribeTransactionsRequest:
		r := resp.(*kmsg.DescribeTransactionsResponse)
		for _, id := range q.TransactionalIDs {
			s := kmsg.NewDescribeTransactionsResponseTransactionState()
			s.TransactionalID, s.ErrorCode = id, code
			r.TransactionStates = append(r.TransactionStates, s)
			n++
		}
	case *kmsg.ConsumerGroupDescribeRequest:
		r := resp.(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range q.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = g, code
			r.Groups = append(r.Groups, rg)
			n++
		}
	case *kmsg.DescribeLogDirsRequest:
		// v0–2 (no top-level code): one directory entry carrying it, as
		// the bridge answers a refusal.
		r := resp.(*kmsg.DescribeLogDirsResponse)
		d := kmsg.NewDescribeLogDirsResponseDir()
		d.ErrorCode = code
		r.Dirs = append(r.Dirs, d)
		n++
	case *kmsg.ElectLeadersRequest:
		// v0 (no top-level code), per partition named.
		r := resp.(*kmsg.ElectLeadersResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.CreateACLsRequest:
		r := resp.(*kmsg.CreateACLsResponse)
		for range q.Creations {
			rr := kmsg.NewCreateACLsResponseResult()
			rr.ErrorCode = code
			r.Results = append(r.Results, rr)
			n++
		}
	case *kmsg.DeleteACLsRequest:
		r := resp.(*kmsg.DeleteACLsResponse)
		for range q.Filters {
			rr := kmsg.NewDeleteACLsResponseResult()
			rr.ErrorCode = code
			r.Results = append(r.Results, rr)
			n++
		}
	case *kmsg.AddPartitionsToTxnRequest:
		// Before v4 (no top-level code), per partition.
		r := resp.(*kmsg.AddPartitionsToTxnResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.TxnOffsetCommitRequest:
		r := resp.(*kmsg.TxnOffsetCommitResponse)
		for _, t := range q.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
				n++
			}
			r.Topics = append(r.Topics, rt)
		}
	}
	return n > 0
}
