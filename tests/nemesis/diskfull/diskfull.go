// Package diskfull gives a process a real full disk: a small tmpfs
// mounted on its data directory, so that its writes meet ENOSPC from the
// kernel in the middle of an append or of a segment roll, with no
// injected error in between. It is test infrastructure and knows nothing
// of the service whose directory it fills.
//
// Mount puts a tmpfs of a fixed size on an empty directory. Fill writes a
// filler file (FillerName, at the top of the directory) that takes all
// but a chosen number of bytes; Drain removes it, so the process finds
// room again without restarting. Space is counted in pages: a tmpfs
// allocates whole pages, and Free reports what statfs says is free.
// Unmount takes the tmpfs away, and with it everything written there.
//
// Mounting needs root (CAP_SYS_ADMIN). Methods of a Disk are safe for
// concurrent use with each other; the process writing the directory may
// take space at the same time, which makes Free, and what Fill leaves,
// a figure of the moment it was taken.
package diskfull

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// FillerName is the file Fill writes at the top of the directory. A
// service that lists its data directory sees it as a regular file.
const FillerName = ".diskfull-filler"

// fillAttempts bounds Fill's retries when a writer takes the space it
// measured before it could take it itself.
const fillAttempts = 10

// Disk is a tmpfs of a fixed size mounted on a directory.
type Disk struct {
	dir  string
	size int64

	mu      sync.Mutex
	mounted bool
}

// Mount mounts a tmpfs of size bytes (rounded up to whole pages) on dir,
// which must be an existing empty directory, and returns it empty. Call
// Unmount when done; with t.TempDir, register it with t.Cleanup after the
// TempDir call so that it runs before the directory is removed.
func Mount(dir string, size int64) (*Disk, error) {
	if size <= 0 {
		return nil, fmt.Errorf("diskfull: size %d: want a positive number of bytes", size)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("diskfull: %w", err)
	}
	names, err := f.Readdirnames(1)
	f.Close()
	switch {
	case err == nil && len(names) > 0:
		return nil, fmt.Errorf("diskfull: %s is not empty (it holds %s); the tmpfs would hide it", dir, names[0])
	case err != nil && !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("diskfull: %s: %w", dir, err)
	}
	opts := fmt.Sprintf("size=%d,mode=0755", size)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("diskfull: mount tmpfs on %s: %w (needs root)", dir, err)
		}
		return nil, fmt.Errorf("diskfull: mount tmpfs on %s: %w", dir, err)
	}
	return &Disk{dir: dir, size: size, mounted: true}, nil
}

// Dir is the directory the tmpfs is mounted on.
func (d *Disk) Dir() string { return d.dir }

// Free returns the bytes free on the tmpfs, from statfs.
func (d *Disk) Free() (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &st); err != nil {
		return 0, fmt.Errorf("diskfull: statfs %s: %w", d.dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Fill grows or shrinks the filler file so that at most leave bytes stay
// free: exactly leave when it is a multiple of the page size, otherwise
// leave rounded down to one. Fill(0) makes the next write that needs a
// new page fail with ENOSPC. It fails when leave is more than the free
// space plus the filler's.
func (d *Disk) Fill(leave int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mounted {
		return errors.New("diskfull: fill: unmounted")
	}
	if leave < 0 {
		return fmt.Errorf("diskfull: fill: leave %d bytes", leave)
	}
	f, err := os.OpenFile(filepath.Join(d.dir, FillerName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("diskfull: fill: %w", err)
	}
	defer f.Close()
	for attempt := 1; ; attempt++ {
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("diskfull: fill: %w", err)
		}
		free, err := d.Free()
		if err != nil {
			return err
		}
		// The pages the filler holds; its size rounded up to a page.
		have := st.Sys().(*syscall.Stat_t).Blocks * 512
		target := have + free - leave
		if target < 0 {
			return fmt.Errorf("diskfull: fill: cannot leave %d bytes free: %d are, the filler's %d included", leave, have+free, have)
		}
		if target <= st.Size() {
			if err := f.Truncate(target); err != nil {
				return fmt.Errorf("diskfull: fill: %w", err)
			}
			return nil
		}
		// fallocate takes the pages for real (a tmpfs gives a sparse
		// file none) and, on a tmpfs, takes none when it fails.
		err = syscall.Fallocate(int(f.Fd()), 0, 0, target)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.ENOSPC) || attempt == fillAttempts {
			return fmt.Errorf("diskfull: fill to %d bytes: %w", target, err)
		}
		// A writer took some of the space meanwhile: measure again.
	}
}

// Drain removes the filler file, giving back the space Fill took. Draining
// a disk that is not filled is a no-op.
func (d *Disk) Drain() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mounted {
		return errors.New("diskfull: drain: unmounted")
	}
	if err := os.Remove(filepath.Join(d.dir, FillerName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("diskfull: drain: %w", err)
	}
	return nil
}

// Unmount takes the tmpfs off the directory, which is then the empty
// directory it was before Mount. While a process still has a file open
// there, the unmount is lazy: the directory is freed at once, and the
// tmpfs goes when the last file on it is closed. Unmounting again is a
// no-op.
func (d *Disk) Unmount() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mounted {
		return nil
	}
	err := syscall.Unmount(d.dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(d.dir, syscall.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("diskfull: unmount %s: %w", d.dir, err)
	}
	d.mounted = false
	return nil
}
