package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) describeClusterAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeCluster, MinVersion: 0, MaxVersion: 1, Handle: handler(b.describeCluster)}
}

func (b *Bridge) describeCluster(ctx context.Context, version int16, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeClusterResponse()
	md, err := b.clusterMetadata(ctx, nil)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaCode(err, adminPlane), message(err)
		return resp, nil
	}
	resp.ClusterID = md.GetClusterId()
	bs := brokers(md.GetNodes())
	resp.ControllerID = controllerID(bs)
	for _, br := range append(slices.Clip(bs), coordinatorBrokers(md.GetKafkaCoordinators(), bs)...) {
		kb := kmsg.NewDescribeClusterResponseBroker()
		kb.NodeID, kb.Host, kb.Port, kb.Rack = br.id, br.host, br.port, br.rack
		resp.Brokers = append(resp.Brokers, kb)
	}
	return resp, nil
}
