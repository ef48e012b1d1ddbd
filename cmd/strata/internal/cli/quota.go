package cli

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
)

// Quotas cap a principal's produce and fetch bytes per second. Storage
// nodes and the gateway throttle a principal over its quota, as Kafka's
// brokers do: the answer says how long to wait, and the clients wait.

// quotaJSON is one quota in JSON output; 0 is unlimited.
type quotaJSON struct {
	Principal             string `json:"principal"`
	ProduceBytesPerSecond int64  `json:"produce_bytes_per_second"`
	FetchBytesPerSecond   int64  `json:"fetch_bytes_per_second"`
}

func toQuotaJSON(q *commonv1.Quota) quotaJSON {
	return quotaJSON{q.GetPrincipal(), q.GetProduceBytesPerSecond(), q.GetFetchBytesPerSecond()}
}

// rateText renders a quota's rate: "unlimited" for 0.
func rateText(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return humanBytes(n) + "/s"
}

// parseQuotaRate reads a --*-bytes-per-sec value as --throttle's are read
// (10MB, 512KiB, 1048576); 0 means unlimited.
func parseQuotaRate(flag, s string) (int64, error) {
	n, err := parseRate(s)
	if err != nil || strings.TrimSpace(s) == "" {
		return 0, usagef("--%s %q: want bytes per second, like 10MB, 512KiB or 1048576 (0: unlimited)", flag, s)
	}
	return n, nil
}

func quotaSet(ctx context.Context, e *Env, args []string) error {
	var principal, produce, fetch string
	f := newFlags(e, "strata quota set --principal User:NAME [--produce-bytes-per-sec N] [--fetch-bytes-per-sec N]",
		"Set a principal's produce or fetch byte-rate quota; a rate not given keeps its current\n"+
			"value, 0 removes that limit (both 0 removes the quota). Rates take units: 10MB, 512KiB,\n"+
			"1048576. A principal over its quota is throttled: the services tell its clients how\n"+
			"long to wait. It takes effect on every service within a second.\n\n"+
			"User:* sets the default quota (Kafka's <default> user): every user without a quota of\n"+
			"its own gets it, each user its own allowance; a user's own quota replaces it whole.",
		"strata quota set --principal User:alice --produce-bytes-per-sec 1MiB")
	f.String(&principal, "", "principal", "User:NAME", "", "the principal the quota is for, or User:* for the default (required)")
	f.String(&produce, "", "produce-bytes-per-sec", "N", "", "produce bytes per second (0: unlimited; default: unchanged)")
	f.String(&fetch, "", "fetch-bytes-per-sec", "N", "", "fetch bytes per second (0: unlimited; default: unchanged)")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if principal == "" {
		return usagef("--principal is required (see '%s --help')", e.Path)
	}
	p, err := acl.ParsePrincipal(principal)
	if err != nil || p.Type != acl.TypeUser {
		return usagef("--principal %q: want User:NAME", principal)
	}
	if produce == "" && fetch == "" {
		return usagef("nothing to set: give --produce-bytes-per-sec or --fetch-bytes-per-sec (see '%s --help')", e.Path)
	}
	q := &commonv1.Quota{Principal: p.String()}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if produce == "" || fetch == "" {
		// Keep the rate not given: read the current quota first.
		list, err := e.gateway().ListQuotas(ctx, connect.NewRequest(&gatewayv1.ListQuotasRequest{}))
		if err != nil {
			return err
		}
		for _, have := range list.Msg.GetQuotas() {
			if have.GetPrincipal() == q.Principal {
				q.ProduceBytesPerSecond, q.FetchBytesPerSecond = have.GetProduceBytesPerSecond(), have.GetFetchBytesPerSecond()
			}
		}
	}
	if produce != "" {
		if q.ProduceBytesPerSecond, err = parseQuotaRate("produce-bytes-per-sec", produce); err != nil {
			return err
		}
	}
	if fetch != "" {
		if q.FetchBytesPerSecond, err = parseQuotaRate("fetch-bytes-per-sec", fetch); err != nil {
			return err
		}
	}
	if _, err := e.gateway().SetQuota(ctx, connect.NewRequest(&gatewayv1.SetQuotaRequest{Quota: q})); err != nil {
		return err
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, toQuotaJSON(q))
	}
	if q.ProduceBytesPerSecond == 0 && q.FetchBytesPerSecond == 0 {
		fmt.Fprintf(e.Stdout, "removed the quota of %s\n", q.Principal)
		return nil
	}
	fmt.Fprintf(e.Stdout, "quota of %s: produce %s, fetch %s\n", q.Principal, rateText(q.ProduceBytesPerSecond), rateText(q.FetchBytesPerSecond))
	return nil
}

func quotaList(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata quota list",
		"List the principals with a quota and their rates.\n"+
			"JSON: an array of {\"principal\",\"produce_bytes_per_second\",\"fetch_bytes_per_second\"} (0: unlimited).",
		"strata quota list --output json")
	if _, err := f.parse(args); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().ListQuotas(ctx, connect.NewRequest(&gatewayv1.ListQuotasRequest{}))
	if err != nil {
		return err
	}
	qs := resp.Msg.GetQuotas()
	if e.Output == "json" {
		out := []quotaJSON{}
		for _, q := range qs {
			out = append(out, toQuotaJSON(q))
		}
		return writeJSON(e.Stdout, out)
	}
	var rows [][]string
	for _, q := range qs {
		rows = append(rows, []string{q.GetPrincipal(), rateText(q.GetProduceBytesPerSecond()), rateText(q.GetFetchBytesPerSecond())})
	}
	table(e.Stdout, []string{"PRINCIPAL", "PRODUCE", "FETCH"}, rows)
	return nil
}
