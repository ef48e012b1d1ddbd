package kafka

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kmsg"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/kafkawire/wiretest"
)

// downGateway fails every call as an unreachable gateway does.
type downGateway struct{}

func down[T any]() (*connect.Response[T], error) {
	return nil, connect.NewError(connect.CodeUnavailable, nil)
}

func (downGateway) Metadata(context.Context, *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	return down[gatewayv1.MetadataResponse]()
}
func (downGateway) FindCoordinator(context.Context, *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	return down[gatewayv1.FindCoordinatorResponse]()
}
func (downGateway) InitProducerId(context.Context, *connect.Request[gatewayv1.InitProducerIdRequest]) (*connect.Response[gatewayv1.InitProducerIdResponse], error) {
	return down[gatewayv1.InitProducerIdResponse]()
}
func (downGateway) CreateTopic(context.Context, *connect.Request[gatewayv1.CreateTopicRequest]) (*connect.Response[gatewayv1.CreateTopicResponse], error) {
	return down[gatewayv1.CreateTopicResponse]()
}
func (downGateway) DeleteTopic(context.Context, *connect.Request[gatewayv1.DeleteTopicRequest]) (*connect.Response[gatewayv1.DeleteTopicResponse], error) {
	return down[gatewayv1.DeleteTopicResponse]()
}
func (downGateway) DescribeTopics(context.Context, *connect.Request[gatewayv1.DescribeTopicsRequest]) (*connect.Response[gatewayv1.DescribeTopicsResponse], error) {
	return down[gatewayv1.DescribeTopicsResponse]()
}
func (downGateway) AlterTopicConfig(context.Context, *connect.Request[gatewayv1.AlterTopicConfigRequest]) (*connect.Response[gatewayv1.AlterTopicConfigResponse], error) {
	return down[gatewayv1.AlterTopicConfigResponse]()
}
func (downGateway) CreatePartitions(context.Context, *connect.Request[gatewayv1.CreatePartitionsRequest]) (*connect.Response[gatewayv1.CreatePartitionsResponse], error) {
	return down[gatewayv1.CreatePartitionsResponse]()
}
func (downGateway) ListGroups(context.Context, *connect.Request[gatewayv1.ListGroupsRequest]) (*connect.Response[gatewayv1.ListGroupsResponse], error) {
	return down[gatewayv1.ListGroupsResponse]()
}
func (downGateway) DescribeGroup(context.Context, *connect.Request[gatewayv1.DescribeGroupRequest]) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
	return down[gatewayv1.DescribeGroupResponse]()
}
func (downGateway) DeleteGroup(context.Context, *connect.Request[gatewayv1.DeleteGroupRequest]) (*connect.Response[gatewayv1.DeleteGroupResponse], error) {
	return down[gatewayv1.DeleteGroupResponse]()
}

func (downGateway) ListTransactions(context.Context, *connect.Request[gatewayv1.ListTransactionsRequest]) (*connect.Response[gatewayv1.ListTransactionsResponse], error) {
	return down[gatewayv1.ListTransactionsResponse]()
}

func (downGateway) DescribeTransactions(context.Context, *connect.Request[gatewayv1.DescribeTransactionsRequest]) (*connect.Response[gatewayv1.DescribeTransactionsResponse], error) {
	return down[gatewayv1.DescribeTransactionsResponse]()
}

func (downGateway) ElectLeaders(context.Context, *connect.Request[gatewayv1.ElectLeadersRequest]) (*connect.Response[gatewayv1.ElectLeadersResponse], error) {
	return down[gatewayv1.ElectLeadersResponse]()
}
func (downGateway) AlterPartitionReassignments(context.Context, *connect.Request[gatewayv1.AlterPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.AlterPartitionReassignmentsResponse], error) {
	return down[gatewayv1.AlterPartitionReassignmentsResponse]()
}
func (downGateway) ListPartitionReassignments(context.Context, *connect.Request[gatewayv1.ListPartitionReassignmentsRequest]) (*connect.Response[gatewayv1.ListPartitionReassignmentsResponse], error) {
	return down[gatewayv1.ListPartitionReassignmentsResponse]()
}
func (downGateway) CreateAcls(context.Context, *connect.Request[gatewayv1.CreateAclsRequest]) (*connect.Response[gatewayv1.CreateAclsResponse], error) {
	return down[gatewayv1.CreateAclsResponse]()
}
func (downGateway) DescribeAcls(context.Context, *connect.Request[gatewayv1.DescribeAclsRequest]) (*connect.Response[gatewayv1.DescribeAclsResponse], error) {
	return down[gatewayv1.DescribeAclsResponse]()
}
func (downGateway) DeleteAcls(context.Context, *connect.Request[gatewayv1.DeleteAclsRequest]) (*connect.Response[gatewayv1.DeleteAclsResponse], error) {
	return down[gatewayv1.DeleteAclsResponse]()
}

// errorCodes lists the ErrorCode fields of v, at any depth.
func errorCodes(v reflect.Value) []int16 {
	var out []int16
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			out = errorCodes(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16 {
				out = append(out, int16(v.Field(i).Int()))
			}
			out = append(out, errorCodes(v.Field(i))...)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			out = append(out, errorCodes(v.Index(i))...)
		}
	}
	return out
}

// decoded encodes resp at version as the listener does and decodes it as
// a client does.
func decoded(t *testing.T, resp kmsg.Response, version int16) kmsg.Response {
	t.Helper()
	resp.SetVersion(version)
	got := kmsg.Key(resp.Key()).Response()
	got.SetVersion(version)
	if err := got.ReadFrom(resp.AppendTo(nil)); err != nil {
		t.Fatalf("%s v%d: the response does not decode: %v", kmsg.NameForKey(resp.Key()), version, err)
	}
	return got
}

// TestErrorPathsAnswerErrors runs every API the listener serves, at every
// version it serves, with a request naming one of everything, on a bridge
// whose gateway is down and which leads no partition: each request fails,
// and its answer, decoded as a client would, carries an error; or there
// is no answer and the connection closes. And the answer the listener
// gives a refused request (before authentication, say) carries the code
// at every served version.
func TestErrorPathsAnswerErrors(t *testing.T) {
	b, err := New(Config{Gateway: downGateway{}, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	const code = int16(34) // ILLEGAL_SASL_STATE
	apis := append(b.APIs(), kafkawire.API{Key: kmsg.ApiVersions, MinVersion: 0, MaxVersion: 3},
		kafkawire.API{Key: kmsg.SASLHandshake, MinVersion: 0, MaxVersion: 1}, kafkawire.API{Key: kmsg.SASLAuthenticate, MinVersion: 0, MaxVersion: 2})
	for _, a := range apis {
		for v := a.MinVersion; v <= a.MaxVersion; v++ {
			body := a.Key.Request()
			body.SetVersion(v)
			wiretest.Populate(reflect.ValueOf(body))
			if p, ok := body.(*kmsg.ProduceRequest); ok {
				p.Acks = -1
			}
			if l, ok := body.(*kmsg.ListTransactionsRequest); ok {
				l.StateFilters = []string{"Ongoing"} // a state Kafka knows: only those ask the coordinators
			}
			refused := kafkawire.ErrorResponseFor(v, body, code)
			if refused == nil {
				t.Errorf("%s v%d: a refused request naming items is not answered", a.Key.Name(), v)
			} else if codes := errorCodes(reflect.ValueOf(decoded(t, refused, v))); !containsCode(codes, code) {
				t.Errorf("%s v%d: the refusal decodes without its code: %v", a.Key.Name(), v, codes)
			}
			if a.Handle == nil || succeedsWithoutUpstream[a.Key] != "" {
				continue
			}
			req := &kafkawire.Request{Header: kafkawire.Header{Key: a.Key, Version: v}, Body: body}
			resp, err := a.Handle(context.Background(), req)
			switch {
			case resp == nil && err == nil:
				t.Errorf("%s v%d: no answer and no error", a.Key.Name(), v)
			case resp == nil:
				// Closed without an answer.
			default:
				codes := errorCodes(reflect.ValueOf(decoded(t, resp, v)))
				if !containsFunc(codes, func(c int16) bool { return c != 0 }) {
					t.Errorf("%s v%d: a failed request answered as a success (error codes %v)", a.Key.Name(), v, codes)
				}
			}
		}
	}
}

// succeedsWithoutUpstream are the APIs a listener with no gateway and no
// log answers as a success, and why.
var succeedsWithoutUpstream = map[kmsg.Key]string{
	kmsg.DescribeLogDirs: "a listener that holds no log answers that it has no directories (TestDescribeLogDirs)",
}

func containsCode(codes []int16, c int16) bool {
	return containsFunc(codes, func(x int16) bool { return x == c })
}

func containsFunc(codes []int16, f func(int16) bool) bool {
	for _, c := range codes {
		if f(c) {
			return true
		}
	}
	return false
}
