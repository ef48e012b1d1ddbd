package kafka

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) describeConfigsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.DescribeConfigs, MinVersion: 0, MaxVersion: 4, Handle: handler(b.describeConfigs)}
}

// describeConfigs answers topic resources from the controller's topic
// description (every key, with whether the topic overrides it) and broker
// resources with an empty list: Strata has no per-broker configs a Kafka
// client could act on.
func (b *Bridge) describeConfigs(ctx context.Context, version int16, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			out, err := b.cfg.Gateway.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{r.ResourceName}}))
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = kafkaCode(err, adminPlane), message(err)
				break
			}
			for _, t := range out.Msg.GetTopics() {
				for _, c := range t.GetConfigs() {
					if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, c.GetKey()) {
						continue
					}
					rc := kmsg.NewDescribeConfigsResponseResourceConfig()
					v := c.GetValue()
					rc.Name, rc.Value = c.GetKey(), &v
					rc.Source = configSource(c.GetSource())
					rc.IsDefault = rc.Source == kmsg.ConfigSourceDefaultConfig
					rr.Configs = append(rr.Configs, rc)
				}
			}
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("config resource type %v is not supported", r.ResourceType)
			rr.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// configSource maps Strata's config source to Kafka's.
func configSource(s controllerv1.ConfigSource) kmsg.ConfigSource {
	if s == controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC {
		return kmsg.ConfigSourceDynamicTopicConfig
	}
	return kmsg.ConfigSourceDefaultConfig
}
