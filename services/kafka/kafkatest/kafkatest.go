// Package kafkatest serves the Kafka door in-process over lib/fakecluster,
// so a test can run real Kafka clients against it as franz-go tests itself
// against kfake: lib/kafkawire's listener and a bridge per fake storage
// node, each node advertising its listener in the fake's metadata.
package kafkatest

import (
	"net"
	"net/http"
	"testing"

	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/kafka"
)

// Listeners serves a Kafka listener for each of fc's storage nodes 1 to
// nodes, as the nodes' own listeners do (the data path on the node, the
// rest through the fake gateway, groups through the coordinator the test
// gave fc with SetCoordinator), until the test ends, and returns their
// addresses, the seeds for a client.
func Listeners(t testing.TB, fc *fakecluster.Cluster, nodes int32) []string {
	t.Helper()
	var seeds []string
	for id := int32(1); id <= nodes; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fc.SetNodeListener(id, serve.KafkaListenerName, serve.KafkaScheme+ln.Addr().String())
		b, err := kafka.New(kafka.Config{
			Gateway:    gatewayv1connect.NewGatewayServiceClient(http.DefaultClient, fc.GatewayURL()),
			Storage:    storagev1connect.NewStorageServiceClient(http.DefaultClient, fc.NodeURL(id)),
			HTTPClient: http.DefaultClient,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := kafkawire.NewServer(kafkawire.Config{APIs: b.APIs()})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		seeds = append(seeds, ln.Addr().String())
	}
	return seeds
}
