package server

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
)

// Concurrent Fetch answers each carry their own records, never bytes of a
// pooled buffer another answer has taken since.
func TestConcurrentFetchesCarryTheirOwnBytes(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	const topics = 4
	want := map[string][]string{}
	for i := range topics {
		name := fmt.Sprintf("t%d", i)
		c.createTopic(name, 1, 1)
		for j := range 5 {
			v := fmt.Sprintf("%s-%d-%s", name, j, strings.Repeat(string(rune('a'+i)), 20<<10))
			want[name] = append(want[name], v)
			if _, err := produce(c.storage(1), name, acksAll, 1, batch(t, v), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl := c.storage(1)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 25 {
				name := fmt.Sprintf("t%d", (g+k)%topics)
				resp, err := cl.Fetch(context.Background(), connect.NewRequest(&storagev1.FetchRequest{
					Partitions: []*storagev1.FetchPartition{{Topic: name, CurrentLeaderEpoch: -1}}, MinBytes: 1,
				}))
				if err != nil {
					errs <- err
					return
				}
				if got := values(t, resp.Msg.GetPartitions()[0].GetRecords()); !slices.Equal(got, want[name]) {
					errs <- fmt.Errorf("fetch of %s carried other bytes (%d values)", name, len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A Fetch reads into a pooled buffer that goes back to the pool once the
// answer is written: serving a megabyte again and again allocates much
// less than a megabyte per answer.
func TestFetchReadsIntoPooledBuffers(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("t", 1, 1)
	v := strings.Repeat("x", 200<<10)
	for range 6 {
		if _, err := produce(c.storage(1), "t", acksAll, 1, batch(t, v), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s := &service{n: c.node(1).node}
	fetchOnce := func() int {
		rb := &readBufs{}
		ctx := context.WithValue(context.Background(), readBufsKey{}, rb)
		resp, err := s.Fetch(ctx, connect.NewRequest(&storagev1.FetchRequest{
			Partitions: []*storagev1.FetchPartition{{Topic: "t", CurrentLeaderEpoch: -1}}, MinBytes: 1,
		}))
		if err != nil {
			t.Fatal(err)
		}
		n := len(resp.Msg.GetPartitions()[0].GetRecords())
		rb.release()
		return n
	}
	read := fetchOnce() // the pool's first buffer
	if read < 800<<10 {
		t.Fatalf("read %d bytes, want about a megabyte", read)
	}
	const rounds = 40
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		fetchOnce()
	}
	runtime.ReadMemStats(&after)
	// sync.Pool drops a quarter of its buffers under the race detector.
	if per := (after.TotalAlloc - before.TotalAlloc) / rounds; per > uint64(read)/2 {
		t.Fatalf("allocated %d bytes per answer of %d bytes", per, read)
	}
}
