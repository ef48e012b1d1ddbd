package serve

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Listener is one named address a service advertises besides its default
// one, as Kafka's advertised.listeners: clients on another network (outside
// a Kubernetes cluster, behind NAT) reach the service at the listener their
// gateway names. See docs/design/gateway.md, "Advertised listeners".
type Listener struct {
	Name string // lower-case letters, digits and '-'; at most 32
	URL  string // http(s) base URL
}

var listenerName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// CheckListenerName returns an error unless name is a valid listener name.
func CheckListenerName(name string) error {
	if !listenerName.MatchString(name) {
		return fmt.Errorf("listener name %q must be 1-32 lower-case letters, digits or '-'", name)
	}
	return nil
}

// CheckBaseURL returns an error unless s is an http(s) URL with a host.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) base URL", s)
	}
	return nil
}

// ParseListeners parses a comma-separated NAME=URL list (the
// --advertise-listeners flags). Empty means none. A URL without a scheme
// gets http://. Names must be valid and unique.
func ParseListeners(s string) ([]Listener, error) {
	var out []Listener
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, u, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not NAME=URL", item)
		}
		name, u = strings.TrimSpace(name), strings.TrimSpace(u)
		if err := CheckListenerName(name); err != nil {
			return nil, err
		}
		if name == KafkaListenerName {
			return nil, fmt.Errorf("listener name %q is reserved for --kafka-listener", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("listener %q named twice", name)
		}
		seen[name] = true
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		if err := CheckBaseURL(u); err != nil {
			return nil, fmt.Errorf("listener %q: %v", name, err)
		}
		out = append(out, Listener{Name: name, URL: u})
	}
	return out, nil
}

// KafkaListenerName is the advertised listener under which a storage node
// registers the address of its Kafka protocol listener (--kafka-listener),
// as KafkaScheme + host:port. Connect clients ignore it; the Kafka bridge
// (services/kafka) hands it out in Kafka's Metadata.
const KafkaListenerName = "kafka"

// KafkaScheme prefixes a Kafka listener's host:port in a registration.
const KafkaScheme = "kafka://"

// CheckKafkaURL reports what is wrong with a registered Kafka listener
// address (KafkaScheme + host:port with a host and a non-zero port), or
// nil.
func CheckKafkaURL(s string) error {
	hp, ok := strings.CutPrefix(s, KafkaScheme)
	if !ok {
		return fmt.Errorf("%q is not %shost:port", s, KafkaScheme)
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" || port == "0" || port == "" {
		return fmt.Errorf("%q is not %shost:port", s, KafkaScheme)
	}
	return nil
}
