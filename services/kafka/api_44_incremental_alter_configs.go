package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/kafkawire"
)

func (b *Bridge) incrementalAlterConfigsAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.IncrementalAlterConfigs, MinVersion: 0, MaxVersion: 1, Handle: handler(b.incrementalAlterConfigs)}
}

func (b *Bridge) incrementalAlterConfigs(ctx context.Context, version int16, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		set, del := map[string]string{}, []string{}
		for _, c := range r.Configs {
			switch c.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if c.Value != nil {
					set[c.Name] = *c.Value
				}
			case kmsg.IncrementalAlterConfigOpDelete:
				del = append(del, c.Name)
			default:
				// APPEND and SUBTRACT are for list-valued configs; no
				// topic config of Strata's is a list.
				rr.ErrorCode = kerr.InvalidConfig.Code
			}
		}
		if rr.ErrorCode == 0 {
			rr.ErrorCode, rr.ErrorMessage = b.alterTopic(ctx, r.ResourceType, r.ResourceName, set, del, req.ValidateOnly)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
