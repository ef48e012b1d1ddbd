package kafka

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// withTimeout bounds an admin call by the request's timeout, or
// adminTimeout when it has none.
func withTimeout(ctx context.Context, ms int32) (context.Context, context.CancelFunc) {
	d := adminTimeout
	if ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}

// alterTopic applies set and delete to one topic's config, or refuses a
// resource that is not a topic.
func (b *Bridge) alterTopic(ctx context.Context, typ kmsg.ConfigResourceType, name string, set map[string]string, del []string, validateOnly bool) (int16, *string) {
	if typ != kmsg.ConfigResourceTypeTopic {
		msg := "only topic configs can be altered"
		return kerr.InvalidRequest.Code, &msg
	}
	_, err := b.cfg.Gateway.AlterTopicConfig(ctx, connect.NewRequest(&gatewayv1.AlterTopicConfigRequest{
		Name: name, SetConfigs: set, DeleteConfigs: del, ValidateOnly: validateOnly,
	}))
	if err != nil {
		code := kafkaCode(err, adminPlane)
		if code == kerr.InvalidRequest.Code {
			code = kerr.InvalidConfig.Code
		}
		return code, message(err)
	}
	return 0, nil
}
