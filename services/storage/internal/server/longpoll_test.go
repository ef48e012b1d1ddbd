package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A long poll over many partitions wakes once when several of them change
// at the same moment (it must neither close its wake-up twice nor miss
// it), and wakes for a change that comes while it waits.
func TestLongPollWakesOnceWhenPartitionsChangeTogether(t *testing.T) {
	s := &service{n: &Node{ctx: context.Background()}}
	far := time.Now().Add(time.Hour)
	for range 300 {
		chans := make([]chan struct{}, 64)
		ro := make([]<-chan struct{}, len(chans))
		for i := range chans {
			chans[i] = make(chan struct{})
			ro[i] = chans[i]
		}
		woke := make(chan bool, 1)
		go func() { woke <- s.waitChange(context.Background(), ro, far) }()
		var wg sync.WaitGroup
		for _, c := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				close(c)
			}()
		}
		wg.Wait()
		if !<-woke {
			t.Fatal("waitChange reported a shutdown")
		}
		// All already closed: wakes at once.
		if !s.waitChange(context.Background(), ro, far) {
			t.Fatal("waitChange reported a shutdown")
		}
	}
	// One change among many, while waiting.
	chans := make([]<-chan struct{}, 8)
	last := make(chan struct{})
	for i := range chans {
		chans[i] = make(chan struct{})
	}
	chans[7] = last
	woke := make(chan bool, 1)
	go func() { woke <- s.waitChange(context.Background(), chans, far) }()
	close(last)
	if !<-woke {
		t.Fatal("waitChange reported a shutdown")
	}
	// A canceled request ends the wait and says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.waitChange(ctx, chans[:7], far) {
		t.Fatal("waitChange on a canceled request reported a change")
	}
}
