package devcluster

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestReadyKafkaLines: the ready block prints a plain kcat line for a
// plain cluster, and for a secure one kcat lines with the security
// options: the admin's certificate over SSL, a token user over SASL_SSL
// PLAIN, both verifying the dev CA.
func TestReadyKafkaLines(t *testing.T) {
	for _, secure := range []bool{false, true} {
		var out bytes.Buffer
		o := options{dir: "/d", storageNodes: 1, controllers: 1, gateways: 1, basePort: DefaultBasePort, secure: secure}
		c := newCluster(o, makePlan("/d", DefaultBasePort, 1, 1, 1, map[string]string{}, secure), &out, io.Discard)
		c.printReady()
		got := out.String()
		var want []string
		if secure {
			want = []string{
				"kcat -b 127.0.0.1:9097 -X security.protocol=SSL -X ssl.ca.location=/d/tls/ca.pem -X ssl.certificate.location=/d/tls/admin.pem -X ssl.key.location=/d/tls/admin-key.pem -L",
				`kcat -b 127.0.0.1:9097 -X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password="$(cut -d= -f2- alice.env)" -X ssl.ca.location=/d/tls/ca.pem -L`,
				"audit log     /d/logs/*.audit.log",
			}
		} else {
			want = []string{"kcat -b 127.0.0.1:9097 -L "}
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("secure=%v: the ready block lacks %q:\n%s", secure, w, got)
			}
		}
		if !secure && (strings.Contains(got, "security.protocol") || strings.Contains(got, "audit log")) {
			t.Errorf("a plain cluster's block names a security protocol:\n%s", got)
		}
	}
}
