package cli

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
)

// Quotas cap a principal's produce and fetch bytes per second, and the
// share of a request handler's time its requests take in each process
// (Kafka's request_percentage). Storage nodes and the gateway throttle a
// principal over its byte quota, every service one over its request
// percentage, as Kafka's brokers do: the answer says how long to wait,
// and the clients wait.

// quotaJSON is one quota in JSON output; 0 is unlimited.
// RequestPercentage is always in quota list's output; quota set's has it
// only when it is not 0, so its output for the byte rates alone is what
// it was before the request percentage.
type quotaJSON struct {
	Principal             string   `json:"principal"`
	ProduceBytesPerSecond int64    `json:"produce_bytes_per_second"`
	FetchBytesPerSecond   int64    `json:"fetch_bytes_per_second"`
	RequestPercentage     *float64 `json:"request_percentage,omitempty"`
}

func toQuotaJSON(q *commonv1.Quota) quotaJSON {
	pct := q.GetRequestPercentage()
	return quotaJSON{q.GetPrincipal(), q.GetProduceBytesPerSecond(), q.GetFetchBytesPerSecond(), &pct}
}

// percentText renders a request percentage: "unlimited" for 0.
func percentText(pct float64) string {
	if pct == 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(pct, 'g', -1, 64) + "%"
}

// parsePercentage reads --request-percentage: a number, 0 or more (more
// than 100 is allowed: several handlers' time), 0 meaning unlimited.
func parsePercentage(s string) (float64, error) {
	pct, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || pct < 0 || math.IsInf(pct, 0) || math.IsNaN(pct) {
		return 0, usagef("--request-percentage %q: want a percentage of one request handler's time, like 5 or 0.5 (0: unlimited)", s)
	}
	return pct, nil
}

func hasRates(q *commonv1.Quota) bool {
	return q.GetProduceBytesPerSecond() != 0 || q.GetFetchBytesPerSecond() != 0 || q.GetRequestPercentage() != 0
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
	var principal, produce, fetch, requests string
	f := newFlags(e, "strata quota set --principal User:NAME [--produce-bytes-per-sec N] [--fetch-bytes-per-sec N] [--request-percentage N]",
		"Set a principal's produce or fetch byte-rate quota, or its request percentage; a rate\n"+
			"not given keeps its current value, 0 removes that limit (all 0 removes the quota).\n"+
			"Rates take units: 10MB, 512KiB, 1048576. The request percentage is Kafka's\n"+
			"request_percentage: the share of one request handler's time the principal's requests\n"+
			"may take in each process (100: one handler's whole time), not counting the time a\n"+
			"request waits (a long poll, replication). A principal over its quota is throttled: the\n"+
			"services tell its clients how long to wait. It takes effect on every service within a\n"+
			"second.\n\n"+
			"User:* sets the default quota (Kafka's <default> user): every user without a quota of\n"+
			"its own gets it, each user its own allowance; a user's own quota replaces it whole.",
		"strata quota set --principal User:alice --produce-bytes-per-sec 1MiB")
	f.String(&principal, "", "principal", "User:NAME", "", "the principal the quota is for, or User:* for the default (required)")
	f.String(&produce, "", "produce-bytes-per-sec", "N", "", "produce bytes per second (0: unlimited; default: unchanged)")
	f.String(&fetch, "", "fetch-bytes-per-sec", "N", "", "fetch bytes per second (0: unlimited; default: unchanged)")
	f.String(&requests, "", "request-percentage", "N", "", "percent of one request handler's time, per process (0: unlimited; default: unchanged)")
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
	if produce == "" && fetch == "" && requests == "" {
		return usagef("nothing to set: give --produce-bytes-per-sec, --fetch-bytes-per-sec or --request-percentage (see '%s --help')", e.Path)
	}
	q := &commonv1.Quota{Principal: p.String()}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if produce == "" || fetch == "" || requests == "" {
		// Keep the rates not given: read the current quota first.
		list, err := e.gateway().ListQuotas(ctx, connect.NewRequest(&gatewayv1.ListQuotasRequest{}))
		if err != nil {
			return err
		}
		for _, have := range list.Msg.GetQuotas() {
			if have.GetPrincipal() == q.Principal {
				q.ProduceBytesPerSecond, q.FetchBytesPerSecond = have.GetProduceBytesPerSecond(), have.GetFetchBytesPerSecond()
				q.RequestPercentage = have.GetRequestPercentage()
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
	if requests != "" {
		if q.RequestPercentage, err = parsePercentage(requests); err != nil {
			return err
		}
	}
	if _, err := e.gateway().SetQuota(ctx, connect.NewRequest(&gatewayv1.SetQuotaRequest{Quota: q})); err != nil {
		return err
	}
	if e.Output == "json" {
		out := toQuotaJSON(q)
		if q.RequestPercentage == 0 {
			out.RequestPercentage = nil
		}
		return writeJSON(e.Stdout, out)
	}
	if !hasRates(q) {
		fmt.Fprintf(e.Stdout, "removed the quota of %s\n", q.Principal)
		return nil
	}
	line := fmt.Sprintf("quota of %s: produce %s, fetch %s", q.Principal, rateText(q.ProduceBytesPerSecond), rateText(q.FetchBytesPerSecond))
	if q.RequestPercentage != 0 {
		line += ", requests " + percentText(q.RequestPercentage)
	}
	fmt.Fprintln(e.Stdout, line)
	return nil
}

func quotaList(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata quota list",
		"List the principals with a quota and their rates.\n"+
			"JSON: an array of {\"principal\",\"produce_bytes_per_second\",\"fetch_bytes_per_second\",\"request_percentage\"}\n"+
			"(0: unlimited).",
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
		rows = append(rows, []string{q.GetPrincipal(), rateText(q.GetProduceBytesPerSecond()), rateText(q.GetFetchBytesPerSecond()),
			percentText(q.GetRequestPercentage())})
	}
	table(e.Stdout, []string{"PRINCIPAL", "PRODUCE", "FETCH", "REQUESTS"}, rows)
	return nil
}
