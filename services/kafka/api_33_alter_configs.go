package kafka

import (
	"context"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) alterConfigsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.AlterConfigs, MinVersion: 0, MaxVersion: 2, Handle: handler(b.alterConfigs)}
}

// alterConfigs replaces a topic's overrides with the given set, as
// Kafka's (non-incremental) AlterConfigs does: overrides not named are
// deleted.
func (b *Bridge) alterConfigs(ctx context.Context, version int16, req *kmsg.AlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		set := map[string]string{}
		for _, c := range r.Configs {
			if c.Value != nil {
				set[c.Name] = *c.Value
			}
		}
		var del []string
		if r.ResourceType == kmsg.ConfigResourceTypeTopic {
			out, err := b.cfg.Gateway.DescribeTopics(ctx, connect.NewRequest(&gatewayv1.DescribeTopicsRequest{Names: []string{r.ResourceName}}))
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = kafkaCode(err, adminPlane), message(err)
				resp.Resources = append(resp.Resources, rr)
				continue
			}
			for _, t := range out.Msg.GetTopics() {
				for _, c := range t.GetConfigs() {
					if _, ok := set[c.GetKey()]; !ok && c.GetSource() == controllerv1.ConfigSource_CONFIG_SOURCE_TOPIC {
						del = append(del, c.GetKey())
					}
				}
			}
		}
		rr.ErrorCode, rr.ErrorMessage = b.alterTopic(ctx, r.ResourceType, r.ResourceName, set, del, req.ValidateOnly)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
