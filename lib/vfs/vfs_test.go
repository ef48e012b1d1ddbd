package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// fsContract runs the same checks against every FS implementation.
func fsContract(t *testing.T, fsys FS, dir string) {
	if err := fsys.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "a", "b", "f")
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("W"), 6); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Size(); n != 11 {
		t.Fatalf("size %d", n)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 6); err != nil || string(buf) != "World" {
		t.Fatalf("ReadAt %q %v", buf, err)
	}
	if n, err := f.ReadAt(buf, 8); n != 3 || !errors.Is(err, io.EOF) {
		t.Fatalf("short ReadAt %d %v", n, err)
	}
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(fsys, name); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile %q %v", b, err)
	}
	if err := WriteFileAtomic(fsys, filepath.Join(dir, "a", "b", "g"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.ReadDir(filepath.Join(dir, "a", "b"))
	if err != nil || len(names) != 2 || names[0] != "f" || names[1] != "g" {
		t.Fatalf("ReadDir %v %v", names, err)
	}
	if err := fsys.Rename(name, filepath.Join(dir, "a", "b", "h")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after rename: %v", err)
	}
	if fi, err := fsys.Stat(filepath.Join(dir, "a", "b", "h")); err != nil || fi.Size() != 5 {
		t.Fatalf("Stat %v %v", fi, err)
	}
	ro, err := fsys.Open(filepath.Join(dir, "a", "b", "h"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Write([]byte("x")); err == nil {
		t.Fatal("write to read-only file succeeded")
	}
	ro.Close()
	rw, err := fsys.OpenReadWrite(filepath.Join(dir, "a", "b", "h"))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := rw.Size(); n != 5 {
		t.Fatalf("OpenReadWrite lost contents: %d", n)
	}
	rw.Close()
	if err := fsys.Remove(filepath.Join(dir, "a", "b", "h")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := FlipBit(fsys, filepath.Join(dir, "a", "b", "g"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := ReadFile(fsys, filepath.Join(dir, "a", "b", "g")); string(b) != "y" {
		t.Fatalf("FlipBit: %q", b)
	}
}

func TestContract(t *testing.T) {
	t.Run("os", func(t *testing.T) { fsContract(t, Default, t.TempDir()) })
	t.Run("mem", func(t *testing.T) { fsContract(t, NewMem(), "/x") })
	t.Run("inject", func(t *testing.T) { fsContract(t, Inject(NewMem()), "/x") })
}

func TestMemCrashDropsUnsynced(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	f, _ := m.Create("/d/synced")
	f.Write([]byte("durable"))
	f.Sync()
	m.SyncDir("/d")
	f.Write([]byte(" lost"))
	g, _ := m.Create("/d/unsynced-name") // never SyncDir'd
	g.Write([]byte("data"))
	g.Sync()

	c := m.Crash(CrashOptions{})
	if b, err := ReadFile(c, "/d/synced"); err != nil || string(b) != "durable" {
		t.Fatalf("synced file after crash: %q %v", b, err)
	}
	if _, err := c.Stat("/d/unsynced-name"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unsynced name survived: %v", err)
	}
	// The original is untouched.
	if b, _ := ReadFile(m, "/d/synced"); string(b) != "durable lost" {
		t.Fatalf("original changed: %q", b)
	}
}

func TestMemCrashTornPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[int]bool{}
	for range 200 {
		m := NewMem()
		m.MkdirAll("/d", 0o755)
		f, _ := m.Create("/d/f")
		f.Write([]byte("0123456789"))
		f.Sync()
		m.SyncDir("/d")
		f.WriteAt([]byte("abcdefghij"), 10)
		f.WriteAt([]byte("XY"), 2) // overwrite of synced bytes, unsynced
		b, err := ReadFile(m.Crash(CrashOptions{Rand: rng}), "/d/f")
		if err != nil {
			t.Fatal(err)
		}
		// Whatever survives is the new bytes up to some point, then the
		// old bytes.
		cur := []byte("01XY456789abcdefghij")
		old := []byte("0123456789")
		k := 0
		for k < len(b) && k < len(cur) && b[k] == cur[k] {
			k++
		}
		if !(bytes.Equal(b[:k], cur[:k]) && (k == len(b) || (k < len(old) && bytes.Equal(b[k:], old[k:])))) {
			t.Fatalf("not a torn prefix: %q", b)
		}
		seen[len(b)] = true
	}
	if len(seen) < 3 {
		t.Fatalf("crash lengths not random: %v", seen)
	}
}

func TestMemCrashRenamePrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	outcomes := map[string]bool{}
	for range 100 {
		m := NewMem()
		m.MkdirAll("/d", 0o755)
		if err := WriteFileAtomic(m, "/d/ckpt", []byte("v1")); err != nil {
			t.Fatal(err)
		}
		// Second version written and renamed but the dir sync "fails".
		f, _ := m.Create("/d/ckpt.tmp")
		f.Write([]byte("v2"))
		f.Sync()
		f.Close()
		m.Rename("/d/ckpt.tmp", "/d/ckpt")
		b, err := ReadFile(m.Crash(CrashOptions{Rand: rng}), "/d/ckpt")
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); s != "v1" && s != "v2" {
			t.Fatalf("checkpoint is %q", s)
		}
		outcomes[string(b)] = true
	}
	if !outcomes["v1"] || !outcomes["v2"] {
		t.Fatalf("outcomes %v", outcomes)
	}
}

func TestMemCrashTruncate(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	f, _ := m.Create("/d/f")
	f.Write([]byte("0123456789"))
	f.Sync()
	m.SyncDir("/d")
	f.Truncate(4)
	if b, _ := ReadFile(m.Crash(CrashOptions{}), "/d/f"); string(b) != "0123456789" {
		t.Fatalf("unsynced truncate kept: %q", b)
	}
	f.Sync()
	if b, _ := ReadFile(m.Crash(CrashOptions{}), "/d/f"); string(b) != "0123" {
		t.Fatalf("synced truncate lost: %q", b)
	}
}

func TestInject(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	custom := errors.New("disk full")
	inj := Inject(m,
		Fault{Op: OpWrite, Path: "seg", After: 2, Torn: 3, Err: custom},
		Fault{Op: OpSync, Path: "seg", After: 1},
	)
	f, err := inj.Create("/d/seg")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := f.Write([]byte("ab")); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	n, err := f.Write([]byte("torn-write"))
	if n != 3 || !errors.Is(err, custom) {
		t.Fatalf("torn write: %d %v", n, err)
	}
	if b, _ := ReadFile(m, "/d/seg"); string(b) != "ababtor" {
		t.Fatalf("file %q", b)
	}
	if _, err := f.Write([]byte("ok")); err != nil {
		t.Fatalf("fault not one-shot: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("second sync: %v", err)
	}
	if inj.Fired() != 2 {
		t.Fatalf("fired %d", inj.Fired())
	}
	// Other paths are untouched; sticky faults keep firing; Clear disarms.
	inj.Add(Fault{Op: OpRename, Sticky: true})
	for range 2 {
		if err := inj.Rename("/d/seg", "/d/x"); !errors.Is(err, ErrInjected) {
			t.Fatalf("rename: %v", err)
		}
	}
	inj.Clear()
	if err := inj.Rename("/d/seg", "/d/x"); err != nil {
		t.Fatal(err)
	}
	g, _ := inj.Create("/d/other")
	if _, err := g.WriteAt([]byte("abcd"), 0); err != nil {
		t.Fatal(err)
	}
	inj.Add(Fault{Op: OpWrite, Torn: -1})
	if n, err := g.WriteAt([]byte("WXYZ"), 4); n != 2 || err == nil {
		t.Fatalf("half torn WriteAt: %d %v", n, err)
	}
	if b, _ := ReadFile(m, "/d/other"); string(b) != "abcdWX" {
		t.Fatalf("file %q", b)
	}
}

// Count fires a fault that many times; Faults lists what is armed and how
// often each fired; ParseOp reads the names Op.String gives.
func TestInjectCountAndList(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	inj := Inject(m, Fault{Op: OpSync, Path: "/d/a", Count: 2}, Fault{Op: OpSyncDir, Sticky: true})
	f, _ := inj.Create("/d/a")
	for i, want := range []bool{true, true, false} {
		if err := f.Sync(); (err != nil) != want {
			t.Fatalf("sync %d: %v, want failure %v", i, err, want)
		}
	}
	inj.SyncDir("/d")
	got := inj.Faults()
	if len(got) != 2 || got[0].Fired != 2 || !got[0].Spent || got[0].Path != "/d/a" || got[1].Fired != 1 || got[1].Spent {
		t.Fatalf("Faults() = %+v", got)
	}
	inj.Clear()
	if len(inj.Faults()) != 0 || inj.Fired() != 3 {
		t.Fatalf("after Clear: %+v, fired %d", inj.Faults(), inj.Fired())
	}
	for o := OpWrite; o <= OpSyncDir; o++ {
		if p, err := ParseOp(o.String()); err != nil || p != o {
			t.Errorf("ParseOp(%q) = %v, %v", o.String(), p, err)
		}
	}
	if _, err := ParseOp("fsync"); err == nil {
		t.Error("ParseOp accepted an unknown name")
	}
}
