package server

import (
	"github.com/strata-mq/strata/gen/strata/tiering/v1/tieringv1connect"
	"github.com/strata-mq/strata/lib/guard"
)

// rules is what each TieringService RPC requires of its caller: all of
// them a Strata service (serviceOnly, security.go); an RPC missing here is
// refused.
var rules = guard.Rules{
	tieringv1connect.TieringServiceUploadSegmentProcedure:      {Access: guard.ServiceOnly, Check: "any Strata service (storage nodes upload)"},
	tieringv1connect.TieringServiceGetTieredStateProcedure:     {Access: guard.ServiceOnly, Check: "any Strata service"},
	tieringv1connect.TieringServiceFetchTieredProcedure:        {Access: guard.ServiceOnly, Check: "any Strata service (storage nodes read for their consumers)"},
	tieringv1connect.TieringServiceOffsetForTimestampProcedure: {Access: guard.ServiceOnly, Check: "any Strata service"},
	tieringv1connect.TieringServiceListSegmentsProcedure:       {Access: guard.ServiceOnly, Check: "any Strata service"},
	tieringv1connect.TieringServiceDeleteRecordsProcedure:      {Access: guard.ServiceOnly, Check: "any Strata service (a partition's leader, for Kafka's DeleteRecords)"},
}
