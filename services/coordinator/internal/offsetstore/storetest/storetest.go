// Package storetest is the conformance suite every offsetstore.Store
// implementation passes: ownership claims and fencing, group state,
// committed offsets, and transaction state.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// Open returns a new, empty store; it is closed by the suite.
type Open func(t *testing.T) offsetstore.Store

// Run runs the suite, one subtest per behaviour, each on a fresh store.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s offsetstore.Store)
	}{
		{"ClaimEmpty", testClaimEmpty},
		{"ClaimLiveOwnedByOther", testClaimLive},
		{"ClaimAfterExpiryFencesOldOwner", testClaimAfterExpiry},
		{"ReclaimBySameOwnerBumpsEpoch", testReclaimSameOwner},
		{"RenewAndRelease", testRenewRelease},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"CommitAndFetch", testCommitFetch},
		{"FetchUnknownGroup", testFetchUnknown},
		{"SaveLoadListGroups", testSaveLoadList},
		{"DeleteGroupKeepsEpoch", testDelete},
		{"DeleteOffsets", testDeleteOffsets},
		{"ClassicProtocolType", testClassicProtocolType},
		{"CommitRacingHandover", testCommitRacingHandover},
	}
	tests = append(tests, txnTests...) // txn.go
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func claim(t *testing.T, s offsetstore.Store, group, owner string, lease time.Duration) (offsetstore.Ownership, bool) {
	t.Helper()
	o, ok, err := s.Claim(ctx(t), group, owner, "http://"+owner, lease)
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", group, owner, err)
	}
	return o, ok
}

func testClaimEmpty(t *testing.T, s offsetstore.Store) {
	if _, ok, err := s.Owner(ctx(t), "g"); err != nil || ok {
		t.Fatalf("Owner of unknown group = %v, %v; want none", ok, err)
	}
	o, ok := claim(t, s, "g", "a", time.Minute)
	if !ok || o.OwnerID != "a" || o.OwnerEpoch != 1 || o.OwnerAddress != "http://a" {
		t.Fatalf("first claim = %+v, %v; want owner a epoch 1", o, ok)
	}
	if !o.Live(time.Now()) {
		t.Fatalf("fresh lease not live: %+v", o)
	}
	got, ok, err := s.Owner(ctx(t), "g")
	if err != nil || !ok || got.OwnerID != "a" || got.OwnerEpoch != 1 {
		t.Fatalf("Owner = %+v, %v, %v", got, ok, err)
	}
}

func testClaimLive(t *testing.T, s offsetstore.Store) {
	claim(t, s, "g", "a", time.Minute)
	o, ok := claim(t, s, "g", "b", time.Minute)
	if ok || o.OwnerID != "a" || o.OwnerEpoch != 1 {
		t.Fatalf("claim of a live group by b = %+v, %v; want refused naming a", o, ok)
	}
}

func testClaimAfterExpiry(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", 50*time.Millisecond)
	if err := s.CommitOffsets(ctx(t), a.Fence(), []offsetstore.Offset{{Topic: "t", Partition: 0, Offset: 5, LeaderEpoch: -1}}); err != nil {
		t.Fatalf("commit by owner: %v", err)
	}
	time.Sleep(120 * time.Millisecond)
	b, ok := claim(t, s, "g", "b", time.Minute)
	if !ok || b.OwnerID != "b" || b.OwnerEpoch != 2 {
		t.Fatalf("claim after expiry = %+v, %v; want b epoch 2", b, ok)
	}
	err := s.CommitOffsets(ctx(t), a.Fence(), []offsetstore.Offset{{Topic: "t", Partition: 0, Offset: 1, LeaderEpoch: -1}})
	if !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("commit by the old owner = %v; want ErrNotOwner", err)
	}
	if err := s.SaveGroup(ctx(t), a.Fence(), offsetstore.Group{GroupID: "g", State: "stable"}); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("save by the old owner = %v; want ErrNotOwner", err)
	}
	if err := s.Renew(ctx(t), a.Fence(), time.Minute); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("renew by the old owner = %v; want ErrNotOwner", err)
	}
	if err := s.DeleteGroup(ctx(t), a.Fence()); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("delete by the old owner = %v; want ErrNotOwner", err)
	}
	offs, err := s.FetchOffsets(ctx(t), "g")
	if err != nil || len(offs) != 1 || offs[0].Offset != 5 {
		t.Fatalf("offsets after fenced commit = %+v, %v; want offset 5 kept", offs, err)
	}
}

func testReclaimSameOwner(t *testing.T, s offsetstore.Store) {
	a1, _ := claim(t, s, "g", "a", time.Minute)
	a2, ok := claim(t, s, "g", "a", time.Minute)
	if !ok || a2.OwnerEpoch != a1.OwnerEpoch+1 {
		t.Fatalf("reclaim by the same owner = %+v, %v; want epoch %d", a2, ok, a1.OwnerEpoch+1)
	}
	if err := s.CommitOffsets(ctx(t), a1.Fence(), []offsetstore.Offset{{Topic: "t", Offset: 1}}); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("commit under the previous incarnation = %v; want ErrNotOwner", err)
	}
}

func testRenewRelease(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", 100*time.Millisecond)
	if err := s.Renew(ctx(t), a.Fence(), time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
	if o, ok := claim(t, s, "g", "b", time.Minute); ok {
		t.Fatalf("claim of a renewed lease succeeded: %+v", o)
	}
	if err := s.Release(ctx(t), a.Fence()); err != nil {
		t.Fatalf("release: %v", err)
	}
	b, ok := claim(t, s, "g", "b", time.Minute)
	if !ok || b.OwnerEpoch != 2 {
		t.Fatalf("claim after release = %+v, %v; want b epoch 2", b, ok)
	}
	if err := s.Release(ctx(t), a.Fence()); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("second release by a = %v; want ErrNotOwner", err)
	}
}

func testConcurrentClaims(t *testing.T, s offsetstore.Store) {
	const n = 8
	var wg sync.WaitGroup
	wins := make(chan offsetstore.Ownership, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, ok, err := s.Claim(ctx(t), "g", fmt.Sprintf("i%d", i), "http://x", time.Minute)
			if err != nil {
				errs <- err
				return
			}
			if ok {
				wins <- o
			}
		}()
	}
	wg.Wait()
	close(wins)
	close(errs)
	for err := range errs {
		t.Fatalf("claim: %v", err)
	}
	var got []offsetstore.Ownership
	for o := range wins {
		got = append(got, o)
	}
	if len(got) != 1 || got[0].OwnerEpoch != 1 {
		t.Fatalf("concurrent claims won %+v; want exactly one with epoch 1", got)
	}
}

func testCommitFetch(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", time.Minute)
	at := time.UnixMilli(1700000000123)
	in := []offsetstore.Offset{
		{Topic: "b", Partition: 1, Offset: 10, LeaderEpoch: 2, Metadata: "m", CommitTime: at},
		{Topic: "a", Partition: 3, Offset: 7, LeaderEpoch: -1},
		{Topic: "a", Partition: 0, Offset: 0, LeaderEpoch: -1},
	}
	if err := s.CommitOffsets(ctx(t), a.Fence(), in); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := s.CommitOffsets(ctx(t), a.Fence(), []offsetstore.Offset{{Topic: "a", Partition: 3, Offset: 9, LeaderEpoch: 4}}); err != nil {
		t.Fatalf("commit over: %v", err)
	}
	got, err := s.FetchOffsets(ctx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		topic string
		p     int32
		off   int64
		ep    int32
	}{{"a", 0, 0, -1}, {"a", 3, 9, 4}, {"b", 1, 10, 2}}
	if len(got) != len(want) {
		t.Fatalf("fetched %+v; want %d offsets", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Topic != w.topic || g.Partition != w.p || g.Offset != w.off || g.LeaderEpoch != w.ep {
			t.Fatalf("offset %d = %+v; want %+v", i, g, w)
		}
	}
	if got[2].Metadata != "m" || !got[2].CommitTime.Equal(at) {
		t.Fatalf("metadata/time = %q %v; want m %v", got[2].Metadata, got[2].CommitTime, at)
	}
	if got[0].CommitTime.IsZero() || time.Since(got[0].CommitTime) > time.Minute {
		t.Fatalf("commit time not set: %v", got[0].CommitTime)
	}
}

// testDeleteOffsets: the named partitions' offsets go, the others stay; a
// partition without one is no error; a stale fence deletes nothing.
func testDeleteOffsets(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", time.Minute)
	in := []offsetstore.Offset{{Topic: "a", Partition: 0, Offset: 5, LeaderEpoch: -1}, {Topic: "a", Partition: 1, Offset: 6, LeaderEpoch: -1},
		{Topic: "b", Partition: 0, Offset: 7, LeaderEpoch: -1}}
	if err := s.CommitOffsets(ctx(t), a.Fence(), in); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOffsets(ctx(t), a.Fence(), []offsetstore.Offset{{Topic: "a", Partition: 1}, {Topic: "b", Partition: 0}, {Topic: "c", Partition: 9}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	got, err := s.FetchOffsets(ctx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Topic != "a" || got[0].Partition != 0 || got[0].Offset != 5 {
		t.Fatalf("after deleting a-1 and b-0: %+v, want a-0 alone", got)
	}
	stale := a.Fence()
	stale.OwnerEpoch--
	if err := s.DeleteOffsets(ctx(t), stale, []offsetstore.Offset{{Topic: "a", Partition: 0}}); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("delete under a stale fence: %v, want ErrNotOwner", err)
	}
	if got, _ := s.FetchOffsets(ctx(t), "g"); len(got) != 1 {
		t.Fatalf("a stale fence deleted: %+v", got)
	}
}

func testFetchUnknown(t *testing.T, s offsetstore.Store) {
	got, err := s.FetchOffsets(ctx(t), "nobody")
	if err != nil || len(got) != 0 {
		t.Fatalf("FetchOffsets(unknown) = %+v, %v; want none", got, err)
	}
	if _, ok, err := s.LoadGroup(ctx(t), "nobody"); ok || err != nil {
		t.Fatalf("LoadGroup(unknown) = %v, %v", ok, err)
	}
}

func testSaveLoadList(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g2", "a", time.Minute)
	b, _ := claim(t, s, "g1", "a", time.Minute)
	claim(t, s, "located-only", "a", time.Minute)
	if err := s.SaveGroup(ctx(t), a.Fence(), offsetstore.Group{GroupID: "g2", State: "stable", MemberCount: 3, Data: []byte(`{"x":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitOffsets(ctx(t), b.Fence(), []offsetstore.Offset{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := s.LoadGroup(ctx(t), "g2")
	if err != nil || !ok || g.State != "stable" || g.MemberCount != 3 || string(g.Data) != `{"x":1}` {
		t.Fatalf("LoadGroup = %+v, %v, %v", g, ok, err)
	}
	list, err := s.ListGroups(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].GroupID != "g1" || list[0].State != "empty" || list[1].GroupID != "g2" || list[1].MemberCount != 3 {
		t.Fatalf("ListGroups = %+v; want g1 (offsets only, empty) and g2 (stable, 3)", list)
	}
}

// testClassicProtocolType saves a classic group (a protocol type) and a
// KIP-848 one (none): each loads and lists with its own, and a save
// without one turns the group back.
func testClassicProtocolType(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "connect-cluster", "a", time.Minute)
	b, _ := claim(t, s, "plain", "a", time.Minute)
	if err := s.SaveGroup(ctx(t), a.Fence(), offsetstore.Group{GroupID: "connect-cluster", State: "stable", MemberCount: 2, ProtocolType: "connect", Data: []byte(`{"Generation":3}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGroup(ctx(t), b.Fence(), offsetstore.Group{GroupID: "plain", State: "empty", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := s.LoadGroup(ctx(t), "connect-cluster")
	if err != nil || !ok || g.ProtocolType != "connect" || string(g.Data) != `{"Generation":3}` {
		t.Fatalf("LoadGroup = %+v, %v, %v; want protocol type connect", g, ok, err)
	}
	list, err := s.ListGroups(ctx(t))
	if err != nil || len(list) != 2 || list[0].ProtocolType != "connect" || list[1].ProtocolType != "" {
		t.Fatalf("ListGroups = %+v, %v; want connect-cluster (connect) and plain (none)", list, err)
	}
	if err := s.SaveGroup(ctx(t), a.Fence(), offsetstore.Group{GroupID: "connect-cluster", State: "empty", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if g, _, _ := s.LoadGroup(ctx(t), "connect-cluster"); g.ProtocolType != "" {
		t.Fatalf("protocol type after a KIP-848 save = %q; want none", g.ProtocolType)
	}
}

func testDelete(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", time.Minute)
	if err := s.SaveGroup(ctx(t), a.Fence(), offsetstore.Group{GroupID: "g", State: "empty", Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitOffsets(ctx(t), a.Fence(), []offsetstore.Offset{{Topic: "t", Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGroup(ctx(t), a.Fence()); err != nil {
		t.Fatal(err)
	}
	if offs, _ := s.FetchOffsets(ctx(t), "g"); len(offs) != 0 {
		t.Fatalf("offsets after delete: %+v", offs)
	}
	if _, ok, _ := s.LoadGroup(ctx(t), "g"); ok {
		t.Fatal("state after delete")
	}
	if list, _ := s.ListGroups(ctx(t)); len(list) != 0 {
		t.Fatalf("listed after delete: %+v", list)
	}
	if err := s.Release(ctx(t), a.Fence()); err != nil {
		t.Fatal(err)
	}
	b, ok := claim(t, s, "g", "b", time.Minute)
	if !ok || b.OwnerEpoch != a.OwnerEpoch+1 {
		t.Fatalf("claim after delete = %+v; want epoch %d (epochs never restart)", b, a.OwnerEpoch+1)
	}
}

// testCommitRacingHandover commits from the old owner while a new owner
// claims: every commit either lands before the claim or fails, and none
// lands after the new owner's first commit.
func testCommitRacingHandover(t *testing.T, s offsetstore.Store) {
	a, _ := claim(t, s, "g", "a", 30*time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var fencedSeen bool
	go func() {
		defer wg.Done()
		for off := int64(1); ; off++ {
			select {
			case <-stop:
				return
			default:
			}
			err := s.CommitOffsets(context.Background(), a.Fence(), []offsetstore.Offset{{Topic: "t", Offset: off}})
			if errors.Is(err, offsetstore.ErrNotOwner) {
				fencedSeen = true
				return
			}
			if err != nil {
				t.Errorf("commit: %v", err)
				return
			}
		}
	}()
	var b offsetstore.Ownership
	testwait.Until(t, 30*time.Second, "b to claim the group once a's lease expired", func() error {
		o, ok := claim(t, s, "g", "b", time.Minute)
		if !ok {
			return fmt.Errorf("owned by %s epoch %d", o.OwnerID, o.OwnerEpoch)
		}
		b = o
		return nil
	})
	if err := s.CommitOffsets(ctx(t), b.Fence(), []offsetstore.Offset{{Topic: "t", Offset: 1_000_000}}); err != nil {
		t.Fatal(err)
	}
	// The old owner's next commit is fenced and ends its loop; wait for
	// that rather than for a time in which it may not have run.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		<-done
	}
	if !fencedSeen {
		t.Fatal("the old owner's commits were never fenced after the handover")
	}
	offs, err := s.FetchOffsets(ctx(t), "g")
	if err != nil || len(offs) != 1 || offs[0].Offset != 1_000_000 {
		t.Fatalf("offsets = %+v, %v; want the new owner's 1000000", offs, err)
	}
}
