package pidblock

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestNextDistinctAcrossBlocks(t *testing.T) {
	var mu sync.Mutex
	fetches := 0
	next := int64(100)
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

func TestNextFetchError(t *testing.T) {
	boom := errors.New("boom")
	a := New(func(context.Context) (int64, int32, error) { return 0, 0, boom })
	if _, err := a.Next(context.Background()); !errors.Is(err, boom) {
		t.Errorf("err = %v; want the fetch's error", err)
	}
	b := New(func(context.Context) (int64, int32, error) { return 5, 0, nil })
	if _, err := b.Next(context.Background()); err == nil {
		t.Error("an empty block was accepted")
	}
}
