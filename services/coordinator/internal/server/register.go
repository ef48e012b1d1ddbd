package server

import (
	"context"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/gen/strata/controller/v1/controllerv1connect"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
)

// Registration with the controller (docs/design/coordinator.md,
// "Registration"): with --controller the instance registers its Connect
// address and listeners, its Kafka listener among them, under its Kafka
// broker id (brokerid.Coordinator of its instance id), and keeps
// the registration alive with heartbeats. Every gateway lists the live
// registrations in its Metadata, so a Kafka client bootstrapped on any
// gateway knows every coordinator's broker before FindCoordinator names
// one.

// registrar keeps this instance registered.
type registrar struct {
	clients  []controllerv1connect.ControllerServiceClient
	names    []string
	answered atomic.Bool // a registration was answered once (granted or refused)
}

// registerRetry is the wait between attempts while the controller cannot
// be reached or refuses the registration.
const registerRetry = time.Second

// registration is what this instance registers.
func (c *Coordinator) registration(incarnation string) *controllerv1.CoordinatorRegistration {
	r := &controllerv1.CoordinatorRegistration{
		CoordinatorId: c.id, KafkaNodeId: brokerid.Coordinator(c.id),
		Address: c.address, IncarnationId: incarnation,
	}
	for _, l := range c.cfg.listeners {
		r.Listeners = append(r.Listeners, &commonv1.Listener{Name: l.Name, Address: l.URL})
	}
	return r
}

// keepRegistered registers, heartbeats and registers again when the
// registration lapsed, moving to the next controller while one cannot be
// reached, until ctx ends; then it unregisters, so gateways stop naming
// the instance at once.
func (c *Coordinator) keepRegistered(ctx context.Context, r *registrar) {
	reg := c.registration(uuid.NewString())
	var id int64
	next := 0
	wait := registerRetry
	refused := ""
	for {
		cl := r.clients[next%len(r.clients)]
		name := r.names[next%len(r.names)]
		if id == 0 {
			resp, err := cl.RegisterCoordinator(ctx, connect.NewRequest(&controllerv1.RegisterCoordinatorRequest{Coordinator: reg}))
			switch {
			case err == nil:
				id = resp.Msg.GetRegistrationId()
				wait = max(time.Duration(resp.Msg.GetHeartbeatIntervalMs())*time.Millisecond, 100*time.Millisecond)
				r.answered.Store(true)
				refused = ""
				c.log.Info("registered with the controller", "controller", name, "kafka_node_id", reg.GetKafkaNodeId())
			case ctx.Err() != nil:
			case connect.CodeOf(err) == connect.CodeUnavailable || connect.CodeOf(err) == connect.CodeDeadlineExceeded:
				next++
				wait = registerRetry
			default:
				// Refused (another live instance holds the Kafka broker id,
				// or a controller without the registry): Kafka clients are
				// then sent to a storage node for this instance's groups.
				// Ask again: the holder may go.
				r.answered.Store(true)
				if msg := err.Error(); msg != refused {
					refused = msg
					c.log.Warn("controller refused the registration; Kafka clients reach this instance's groups through a storage node", "err", msg)
				}
				wait = registerRetry
			}
		} else {
			_, err := cl.CoordinatorHeartbeat(ctx, connect.NewRequest(&controllerv1.CoordinatorHeartbeatRequest{KafkaNodeId: reg.GetKafkaNodeId(), RegistrationId: id}))
			switch {
			case err == nil, ctx.Err() != nil:
			case connect.CodeOf(err) == connect.CodeNotFound:
				c.log.Warn("registration lapsed; registering again", "err", err.Error())
				id = 0
				continue
			default:
				next++
			}
		}
		select {
		case <-ctx.Done():
			if id != 0 {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(2*time.Second, c.cfg.ShutdownTimeout()))
				if _, err := cl.UnregisterCoordinator(uctx, connect.NewRequest(&controllerv1.UnregisterCoordinatorRequest{RegistrationId: id})); err != nil {
					c.log.Warn("unregister from the controller; the registration ends with its lease", "err", err.Error())
				}
				cancel()
			}
			return
		case <-time.After(wait):
		}
	}
}
