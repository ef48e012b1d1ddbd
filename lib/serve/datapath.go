package serve

import (
	"math"

	"connectrpc.com/connect"
)

// The data path (Produce, Fetch and Replicate between clients, gateways
// and storage nodes) carries record batches, which are already compressed
// by the producer's codec when compression pays; Kafka never compresses
// them again on the wire. Connect's defaults would: its clients accept
// gzip and its handlers then gzip every answer, however small. On the data
// path that doubles the work of every byte for no gain (it was a quarter of
// a storage node's CPU while producing at RF=3 and two thirds while serving
// consumers), so both ends turn it off. The Go client (module client) sets
// the same client option on its storage clients.

// DataPathHandlerOption makes a handler answer uncompressed whatever the
// caller accepts. It still reads requests a caller chose to compress.
func DataPathHandlerOption() connect.HandlerOption {
	return connect.WithCompressMinBytes(math.MaxInt)
}

// DataPathClientOption makes a client ask for uncompressed answers: it
// removes gzip from the encodings it accepts (Connect then sends
// Accept-Encoding: identity, so net/http adds no gzip of its own either).
func DataPathClientOption() connect.ClientOption {
	return connect.WithAcceptCompression("gzip", nil, nil)
}
