//go:build !unix

package recordbatch

import "time"

// processCPU is not measured here; benchmarks then report wall time only.
func processCPU() time.Duration { return 0 }
