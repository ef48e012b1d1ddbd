package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// TestTopicDescribeLogExtents checks the local and tiered columns of
// `topic describe`, text and JSON, as the partition leaders' DescribeLog
// reports them, and that an unanswerable leader leaves them null without
// failing the command or dropping the contract's fields.
func TestTopicDescribeLogExtents(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name  string
		setup func(fc *fakecluster.Cluster)
		// want is partition 1's extent: local start, local end, local
		// bytes (-1: any positive), tiered start, tiered end, tiered bytes.
		want [6]*int64
		row  string // fields of partition 1's text row after END
	}{
		{
			name:  "nothing tiered",
			setup: func(*fakecluster.Cluster) {},
			want:  [6]*int64{n(0), n(3), n(-1), nil, nil, n(0)},
			row:   "0 3 * - - 0",
		},
		{
			name:  "tiered below local start",
			setup: func(fc *fakecluster.Cluster) { fc.SetTiered("orders", 1, 2, 2, 4096) },
			want:  [6]*int64{n(2), n(3), n(-1), n(0), n(2), n(4096)},
			row:   "2 3 * 0 2 4096",
		},
		{
			name: "leader cannot describe the log",
			setup: func(fc *fakecluster.Cluster) {
				fc.AddFault(&fakecluster.Fault{Method: "DescribeLog", Topic: "orders", Partition: 1, Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_UNSPECIFIED})
			},
			want: [6]*int64{nil, nil, nil, nil, nil, nil},
			row:  "- - - - - -",
		},
		{
			name: "gateway metadata fails",
			setup: func(fc *fakecluster.Cluster) {
				fc.AddFault(&fakecluster.Fault{Method: "Metadata", Partition: -1, Code: connect.CodeUnavailable, Reason: commonv1.Reason_REASON_UNSPECIFIED})
			},
			want: [6]*int64{nil, nil, nil, nil, nil, nil},
			row:  "- - - - - -",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fake(t)
			gw := fc.GatewayURL()
			if r := run(t, gw, "", "topic", "create", "orders", "-p", "3", "-r", "2"); r.code != 0 {
				t.Fatalf("%+v", r)
			}
			if r := run(t, gw, "a\nb\nc\n", "produce", "orders", "-p", "1"); r.code != 0 {
				t.Fatalf("%+v", r)
			}
			tc.setup(fc)

			r := run(t, gw, "", "topic", "describe", "orders", "--output", "json")
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("json: %+v", r)
			}
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.UseNumber()
			var raw struct {
				Partitions []map[string]any `json:"partitions"`
			}
			if err := dec.Decode(&raw); err != nil || len(raw.Partitions) != 3 {
				t.Fatalf("json: %v: %s", err, r.stdout)
			}
			p1 := raw.Partitions[1]
			for _, k := range []string{"partition", "leader", "leader_epoch", "replicas", "isr", "log_start_offset", "log_end_offset"} {
				if _, ok := p1[k]; !ok {
					t.Errorf("partition JSON lacks %q: %v", k, p1)
				}
			}
			if p1["log_end_offset"] != json.Number("3") {
				t.Errorf("log_end_offset = %v", p1["log_end_offset"])
			}
			keys := []string{"local_log_start_offset", "local_log_end_offset", "local_bytes", "tiered_log_start_offset", "tiered_log_end_offset", "tiered_bytes"}
			for i, k := range keys {
				v, ok := p1[k]
				if !ok {
					t.Errorf("partition JSON lacks %q: %v", k, p1)
					continue
				}
				want := tc.want[i]
				switch {
				case want == nil && v != nil:
					t.Errorf("%s = %v, want null", k, v)
				case want != nil && v == nil:
					t.Errorf("%s = null, want %d", k, *want)
				case want != nil && *want == -1:
					if x, err := v.(json.Number).Int64(); err != nil || x <= 0 {
						t.Errorf("%s = %v, want positive", k, v)
					}
				case want != nil && v != json.Number(jsonInt(*want)):
					t.Errorf("%s = %v, want %d", k, v, *want)
				}
			}

			// Not a compacted topic: no dirty ratio, and no DIRTY column.
			if v, ok := p1["cleaner_dirty_ratio"]; !ok || v != nil {
				t.Errorf("cleaner_dirty_ratio = %v (present %v), want null", v, ok)
			}

			r = run(t, gw, "", "topic", "describe", "orders")
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("text: %+v", r)
			}
			lines := strings.Split(r.stdout, "\n")
			header := strings.Fields(lines[1])
			wantHeader := []string{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "START", "END",
				"LOCAL-START", "LOCAL-END", "LOCAL-BYTES", "TIERED-START", "TIERED-END", "TIERED-BYTES"}
			if strings.Join(header, " ") != strings.Join(wantHeader, " ") {
				t.Fatalf("header = %q", lines[1])
			}
			row := strings.Fields(lines[3]) // partition 1
			if len(row) != len(wantHeader) || row[0] != "1" {
				t.Fatalf("row = %q", lines[3])
			}
			for i, w := range strings.Fields(tc.row) {
				if got := row[7+i]; w != "*" && got != w {
					t.Errorf("%s = %q, want %q (row %q)", wantHeader[7+i], got, w, lines[3])
				}
			}
		})
	}
}

func jsonInt(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A leader's DescribeLog answer for a compacted topic carries the log
// cleaner's dirty ratio into the partition's JSON.
func TestSetLogExtentDirtyRatio(t *testing.T) {
	ratio := 0.25
	var p partitionJSON
	setLogExtent(&p, &storagev1.DescribeLogPartitionResult{LogEndOffset: 10, TieredEndOffset: -1, CleanerDirtyRatio: &ratio})
	if p.CleanerDirtyRatio == nil || *p.CleanerDirtyRatio != 0.25 {
		t.Fatalf("dirty ratio %v", p.CleanerDirtyRatio)
	}
	setLogExtent(&p, &storagev1.DescribeLogPartitionResult{LogEndOffset: 10, TieredEndOffset: -1})
	if p.CleanerDirtyRatio == nil {
		t.Fatal("an answer without a ratio cleared one already set")
	}
	var q partitionJSON
	setLogExtent(&q, &storagev1.DescribeLogPartitionResult{LogEndOffset: 10, TieredEndOffset: -1})
	if q.CleanerDirtyRatio != nil {
		t.Fatalf("dirty ratio %v for a topic that is not compacted", *q.CleanerDirtyRatio)
	}
}
