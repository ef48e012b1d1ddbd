// Package vfs is the filesystem interface the storage code is written
// against, so that tests can swap the operating system for an in-memory
// filesystem that simulates power loss (NewMem, MemFS.Crash) or for a
// wrapper that injects I/O errors and torn writes (Inject). For fault
// tests of real processes, both work over the operating system too:
// Inject(Default) fails operations as faults are armed at run time, and
// NewVolatile remembers what is not yet durable so that PowerCut can leave
// the disk as a power loss would.
//
// Only the operations the storage code needs are here. Names are paths as
// the os package takes them; implementations clean them with
// filepath.Clean.
//
// Durability contract (what callers may rely on, and what MemFS models):
//
//   - File.Sync makes the file's contents and size durable.
//   - Creating, renaming and removing a name is durable only after SyncDir
//     on the directory that holds it.
//   - Until then, after a power loss, any prefix of the file's unsynced
//     writes may have reached the disk, and any prefix (in order) of the
//     directory's unsynced name changes.
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// File is an open file. ReadAt may be called concurrently with itself and
// with WriteAt on disjoint ranges; the other methods need external
// synchronisation, as with *os.File.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Write writes at the file's current position and advances it.
	io.Writer
	io.Closer
	// Sync makes the file's contents and size durable.
	Sync() error
	// Truncate changes the size of the file. It does not move the
	// position used by Write.
	Truncate(size int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
}

// FS is a filesystem.
type FS interface {
	// Create creates or truncates the named file and opens it read-write.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens the named file read-write, creating it empty if
	// it does not exist and keeping its contents if it does.
	OpenReadWrite(name string) (File, error)
	// Remove removes a file. Open handles keep working until closed.
	Remove(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names in a directory, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes a file. A missing file gives an error for which
	// errors.Is(err, os.ErrNotExist) holds.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes the name changes in dir durable.
	SyncDir(dir string) error
}

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func wrapOS(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Create(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644))
}

func (osFS) Open(name string) (File, error) { return wrapOS(os.Open(name)) }

func (osFS) OpenReadWrite(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644))
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFileAtomic replaces name with data so that after a crash the file
// holds either its old contents or data, never a mixture: it writes
// name+".tmp", syncs it, renames it over name and syncs the directory.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err == nil {
		err = fs.SyncDir(filepath.Dir(name))
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return nil
}

// ReadFile reads a whole file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// FlipBit inverts one bit of the byte at off in the named file, for tests
// that simulate media corruption. The change is synced.
func FlipBit(fs FS, name string, off int64, bit uint) error {
	f, err := fs.OpenReadWrite(name)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return err
	}
	b[0] ^= 1 << (bit & 7)
	if _, err := f.WriteAt(b[:], off); err != nil {
		return err
	}
	return f.Sync()
}
