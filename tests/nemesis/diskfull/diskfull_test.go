package diskfull

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// size is the tmpfs the tests mount: 64 pages of 4 KiB.
const size = 256 << 10

// mount mounts a Disk on a new directory and unmounts it when the test
// ends. A machine where mounting fails fails the test: the fault suite
// must not pass by skipping.
func mount(t *testing.T) *Disk {
	t.Helper()
	d, err := Mount(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return d
}

func free(t *testing.T, d *Disk) int64 {
	t.Helper()
	n, err := d.Free()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFillAndDrain fills the disk, checks that a new file and an append
// to an open file both meet ENOSPC, and that Drain gives the room back.
func TestFillAndDrain(t *testing.T) {
	d := mount(t)
	if got := free(t, d); got != size {
		t.Fatalf("free on a new disk: %d, want %d", got, size)
	}
	seg, err := os.Create(filepath.Join(d.Dir(), "segment"))
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	chunk := make([]byte, 3000) // under a page, so appends share pages
	if _, err := seg.Write(chunk); err != nil {
		t.Fatal(err)
	}

	if err := d.Fill(0); err != nil {
		t.Fatal(err)
	}
	if got := free(t, d); got != 0 {
		t.Fatalf("free after Fill(0): %d", got)
	}
	// The append fills the rest of its page, then needs a new one.
	n, err := seg.Write(chunk)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append after Fill(0): wrote %d, err %v; want ENOSPC", n, err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir(), "next-segment"), make([]byte, 4<<10), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("new file after Fill(0): %v, want ENOSPC", err)
	}

	if err := d.Drain(); err != nil {
		t.Fatal(err)
	}
	if _, err := seg.Write(chunk); err != nil {
		t.Fatalf("append after Drain: %v", err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir(), "next-segment"), make([]byte, 4<<10), 0o644); err != nil {
		t.Fatalf("new file after Drain: %v", err)
	}
	if err := d.Drain(); err != nil {
		t.Errorf("second Drain: %v", err)
	}
}

// TestFillLeaves checks what Fill leaves free, growing and shrinking the
// filler, and what it refuses.
func TestFillLeaves(t *testing.T) {
	page := int64(os.Getpagesize())
	d := mount(t)
	for _, tc := range []struct {
		name     string
		leave    int64
		wantFree int64
	}{
		{"two pages", 2 * page, 2 * page},
		{"full", 0, 0},
		{"grow back to half", size / 2, size / 2},
		{"not a page multiple: rounded down", 2*page + 100, 2 * page},
		{"everything", size, size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := d.Fill(tc.leave); err != nil {
				t.Fatal(err)
			}
			if got := free(t, d); got != tc.wantFree {
				t.Fatalf("Fill(%d) left %d free, want %d", tc.leave, got, tc.wantFree)
			}
		})
	}
	// Exactly what is left fits; a byte more does not.
	if err := d.Fill(2 * page); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir(), "fits"), make([]byte, 2*page), 0o644); err != nil {
		t.Fatalf("writing the %d bytes left: %v", 2*page, err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir(), "one-more"), []byte{1}, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a byte more: %v, want ENOSPC", err)
	}
	for _, leave := range []int64{-1, size + page} {
		if err := d.Fill(leave); err == nil || !strings.HasPrefix(err.Error(), "diskfull: ") {
			t.Errorf("Fill(%d): %v, want a diskfull error", leave, err)
		}
	}
}

// TestUnmount checks that Unmount leaves an ordinary empty directory,
// also while a file on the disk is still open, and is safe twice.
func TestUnmount(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy bool // hold a file open on the disk
	}{
		{"idle", false},
		{"busy", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mount(t)
			if err := d.Fill(0); err != nil {
				t.Fatal(err)
			}
			if tc.busy {
				f, err := os.Open(filepath.Join(d.Dir(), FillerName))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			if err := d.Unmount(); err != nil {
				t.Fatal(err)
			}
			if err := d.Unmount(); err != nil {
				t.Errorf("second Unmount: %v", err)
			}
			ents, err := os.ReadDir(d.Dir())
			if err != nil || len(ents) != 0 {
				t.Fatalf("directory after Unmount: %v, %v; want empty", ents, err)
			}
			var dir, parent syscall.Stat_t
			if err := syscall.Stat(d.Dir(), &dir); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Stat(filepath.Dir(d.Dir()), &parent); err != nil {
				t.Fatal(err)
			}
			if dir.Dev != parent.Dev {
				t.Fatalf("%s is still a mount point (device %d, its parent's %d)", d.Dir(), dir.Dev, parent.Dev)
			}
			if err := d.Fill(0); err == nil {
				t.Error("Fill after Unmount: no error")
			}
		})
	}
}

// TestMountRefuses checks the directories and sizes Mount refuses.
func TestMountRefuses(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  string
		size int64
	}{
		{"not empty", full, size},
		{"missing", filepath.Join(t.TempDir(), "missing"), size},
		{"a file", filepath.Join(full, "data"), size},
		{"size 0", t.TempDir(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Mount(tc.dir, tc.size)
			if err == nil {
				d.Unmount()
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "diskfull: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}
