package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one invocation measured, as written to JSON.
type Report struct {
	Started        time.Time `json:"started"`
	Command        string    `json:"command"`
	IdleSeconds    float64   `json:"idle_s"`
	ProduceSeconds float64   `json:"produce_s"`
	// Rows are the sizes in the order run; the first is the baseline.
	Rows    []Row    `json:"rows"`
	Targets []Target `json:"targets"`
	Error   string   `json:"error,omitempty"`
}

// Row is one size's measures.
type Row struct {
	Partitions int `json:"partitions"`
	Topics     int `json:"topics"`
	// CreateSeconds runs from the first CreateTopic until the storage
	// nodes' metrics show every replica hosted and every leader with all
	// three replicas in its ISR; CreateMetadataSeconds until the
	// controller's metadata shows every partition led and in sync (which
	// it does from the creation on).
	CreateSeconds         float64 `json:"create_s"`
	CreateMetadataSeconds float64 `json:"create_metadata_s"`
	// Cluster* sum the processes' idle figures.
	ClusterCPUPercent float64    `json:"idle_cpu_percent_of_core"`
	ClusterRSSMB      float64    `json:"rss_mb"`
	ClusterOpenFiles  int        `json:"open_files"`
	ClusterGoroutines int        `json:"goroutines"`
	Processes         []ProcStat `json:"processes"`
	// SnapshotBytes is the encoded size of the first WatchMetadata
	// message (the full snapshot) a new watcher receives.
	SnapshotBytes int `json:"metadata_snapshot_bytes"`
	// StorageMetricsBytes is the size of storage-1's /metrics at idle:
	// its per-partition gauges grow with the replicas it hosts.
	StorageMetricsBytes int `json:"storage_metrics_bytes"`
	// ProduceMBps is strata-load's closed loop over a topic of Partitions
	// partitions, RF=3 acks=all; 0 with ProduceError when it failed.
	ProduceMBps            float64 `json:"produce_mb_per_s"`
	ProduceCPUSecondsPerGB float64 `json:"produce_cluster_cpu_s_per_gb,omitempty"`
	ProduceError           string  `json:"produce_error,omitempty"`
	// FailoverSeconds runs from SIGKILL of storage-1 until every one of
	// the FailoverPartitions it led has another leader in the metadata.
	FailoverSeconds    float64 `json:"failover_s"`
	FailoverPartitions int     `json:"failover_partitions"`
}

// ProcStat is one process's idle figures.
type ProcStat struct {
	Name       string  `json:"name"`
	CPUPercent float64 `json:"idle_cpu_percent_of_core"`
	RSSMB      float64 `json:"rss_mb"`
	OpenFiles  int     `json:"open_files"`
	Goroutines int     `json:"goroutines"`
}

// Target is one of the goals and whether this run met it.
type Target struct {
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

// targets checks the goals against the rows that have the sizes
// they name; a goal whose size was not run is left out.
func targets(rows []Row) []Target {
	var out []Target
	find := func(n int) *Row {
		for i := range rows {
			if rows[i].Partitions == n {
				return &rows[i]
			}
		}
		return nil
	}
	if r := find(10000); r != nil && r.ClusterGoroutines > 0 {
		out = append(out, Target{What: "10,000 partitions: idle CPU of the whole cluster", Value: r.ClusterCPUPercent,
			Unit: "% of one core", Target: "< 10", Met: r.ClusterCPUPercent < 10})
	}
	for _, r := range rows {
		if r.FailoverSeconds > 0 {
			out = append(out, Target{What: fmt.Sprintf("%d partitions: new leaders for a killed node's %d", r.Partitions, r.FailoverPartitions),
				Value: r.FailoverSeconds, Unit: "s", Target: "<= 10", Met: r.FailoverSeconds <= 10})
		}
	}
	if len(rows) > 0 && rows[0].ProduceMBps > 0 {
		if r := find(1000); r != nil && r != &rows[0] {
			ratio := r.ProduceMBps / rows[0].ProduceMBps
			out = append(out, Target{What: fmt.Sprintf("produce over 1,000 partitions / over %d", rows[0].Partitions),
				Value: round3(ratio), Unit: "x", Target: ">= 0.8", Met: ratio >= 0.8})
		}
	}
	return out
}

func printText(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "strata-scale: 3 storage nodes, RF=3; idle over %.0f s; produce %.0f s, RF=3 acks=all\n\n", rep.IdleSeconds, rep.ProduceSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partitions\ttopics\tcreate s\tidle CPU % core\tRSS MB\topen files\tgoroutines\tsnapshot bytes\tstorage-1 /metrics bytes\tproduce MB/s\tfailover s\t")
	for _, r := range rep.Rows {
		prod := f1(r.ProduceMBps)
		switch {
		case r.ProduceError != "":
			prod = "failed"
		case r.ProduceMBps == 0:
			prod = "-" // --duration 0
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%s\t%.0f\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Partitions, r.Topics, r.CreateSeconds,
			f1(r.ClusterCPUPercent), r.ClusterRSSMB, r.ClusterOpenFiles, r.ClusterGoroutines, r.SnapshotBytes, r.StorageMetricsBytes, prod,
			failoverCell(r))
	}
	if len(rep.Rows) > 1 {
		b := rep.Rows[0]
		for _, r := range rep.Rows[1:] {
			fmt.Fprintf(tw, "%d / %d\t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Partitions, b.Partitions,
				ratio(r.CreateSeconds, b.CreateSeconds), ratio(r.ClusterCPUPercent, b.ClusterCPUPercent),
				ratio(r.ClusterRSSMB, b.ClusterRSSMB), ratio(float64(r.ClusterOpenFiles), float64(b.ClusterOpenFiles)),
				ratio(float64(r.ClusterGoroutines), float64(b.ClusterGoroutines)), ratio(float64(r.SnapshotBytes), float64(b.SnapshotBytes)),
				ratio(float64(r.StorageMetricsBytes), float64(b.StorageMetricsBytes)),
				ratio(r.ProduceMBps, b.ProduceMBps), ratio(r.FailoverSeconds, b.FailoverSeconds))
		}
	}
	tw.Flush()

	if len(rep.Rows) > 0 {
		fmt.Fprintln(w, "\nper process, idle: CPU % of one core / RSS MB / open files / goroutines")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := []string{"process"}
		for _, r := range rep.Rows {
			head = append(head, fmt.Sprintf("%d partitions", r.Partitions))
		}
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for i, p := range rep.Rows[0].Processes {
			cells := []string{p.Name}
			for _, r := range rep.Rows {
				if i < len(r.Processes) {
					q := r.Processes[i]
					cells = append(cells, fmt.Sprintf("%s / %.0f / %d / %d", f1(q.CPUPercent), q.RSSMB, q.OpenFiles, q.Goroutines))
				}
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		tw.Flush()
	}
	for _, r := range rep.Rows {
		if r.ProduceError != "" {
			fmt.Fprintf(w, "\nproduce over %d partitions failed: %s\n", r.Partitions, r.ProduceError)
		}
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "\ntargets")
		for _, t := range rep.Targets {
			met := "not met"
			if t.Met {
				met = "met"
			}
			fmt.Fprintf(w, "  %s: %g %s (target %s): %s\n", t.What, t.Value, t.Unit, t.Target, met)
		}
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "\nstopped: %s\n", rep.Error)
	}
}

func failoverCell(r Row) string {
	if r.FailoverSeconds == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%d)", r.FailoverSeconds, r.FailoverPartitions)
}

func f1(x float64) string { return fmt.Sprintf("%.1f", x) }

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f x", a/b)
}

func writeJSONFile(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
