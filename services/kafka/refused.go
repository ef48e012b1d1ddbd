package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/kafkawire"
)

// refusedAPIs are the transaction APIs: Strata has no transaction
// coordinator yet, so they are left out of ApiVersions and, when a client
// sends one anyway, answered UNSUPPORTED_VERSION in every error field
// rather than by closing the connection.
func refusedAPIs() []kafkawire.API {
	return []kafkawire.API{
		{Key: kmsg.AddPartitionsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuse},
		{Key: kmsg.AddOffsetsToTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuse},
		{Key: kmsg.EndTxn, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuse},
		{Key: kmsg.TxnOffsetCommit, MinVersion: 0, MaxVersion: 3, Hidden: true, Handle: refuse},
	}
}

// refuse answers UNSUPPORTED_VERSION in the response's top-level code or,
// where its version has none, in each partition's; a request naming no
// partition there is closed without an answer, which could only read as
// success.
func refuse(_ context.Context, r *kafkawire.Request) (kmsg.Response, error) {
	if resp := kafkawire.ErrorResponse(r, kerr.UnsupportedVersion.Code); resp != nil {
		return resp, nil
	}
	return nil, errors.New("transactions are not supported")
}
