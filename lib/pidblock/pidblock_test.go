package pidblock

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Ids handed out concurrently across several blocks are all distinct,
// and a block is fetched only when the last one is used up.
func TestNextDistinctAcrossBlocks(t *testing.T) {
	var mu sync.Mutex
	fetches, next := 0, int64(100)
	a := New(func(context.Context) (int64, int32, error) {
		mu.Lock()
		defer mu.Unlock()
		fetches++
		first := next
		next += 50 // blocks need not be adjacent
		return first, 4, nil
	})
	var wg sync.WaitGroup
	ids := make([]int64, 40)
	for i := range ids {
		wg.Go(func() {
			id, err := a.Next(context.Background())
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	if fetches != 10 {
		t.Errorf("%d fetches for 40 ids in blocks of 4; want 10", fetches)
	}
}

// A failed fetch is the caller's error, and an empty block is refused.
func TestNextFetchError(t *testing.T) {
	boom := errors.New("boom")
	if _, err := New(func(context.Context) (int64, int32, error) { return 0, 0, boom }).Next(context.Background()); !errors.Is(err, boom) {
		t.Errorf("err = %v; want the fetch's error", err)
	}
	if _, err := New(func(context.Context) (int64, int32, error) { return 5, 0, nil }).Next(context.Background()); err == nil {
		t.Error("an empty block was accepted")
	}
}
