package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// ErrPowerCut is the error of every operation on a VolatileFS, and on its
// files, after PowerCut.
var ErrPowerCut = errors.New("vfs: the power was cut")

// maxKeptReplaced is the largest file whose durable contents a VolatileFS
// keeps in memory when a rename replaces it, so that a power cut can bring
// it back. Larger replaced files are not restored.
const maxKeptReplaced = 64 << 20

// VolatileFS wraps a filesystem, normally the operating system's (perhaps
// through Inject), and remembers what the durability contract (package
// doc) does not yet promise is on the disk, so that PowerCut can leave the
// files as a power loss at that instant could: the operating system's
// counterpart of MemFS.Crash, for real processes (as Jepsen's LazyFS).
//
// What it tracks, through its own operations only:
//
//   - Per file opened for writing (Create, OpenReadWrite), the size as of
//     its last successful Sync. A file that existed when first opened
//     counts as durable at its size then; Create of an existing file and
//     Truncate lower that size at once (the old bytes are gone from the
//     page cache and cannot be given back).
//   - Per directory, the names created (by Create or OpenReadWrite) and
//     renamed since its last successful SyncDir, in order. When a rename
//     replaces a file, that file's durable contents are kept in memory (up
//     to 64 MiB) until the directory is synced.
//
// PowerCut undoes, per directory and newest first, the name changes since
// its last SyncDir: a created name is removed, a renamed file is renamed
// back and the file it replaced is written back. Then every tracked file
// longer than its durable size is truncated to it. The result is a state a
// real disk may be in after losing power, with these limits, stated so a
// test knows what it does not cover:
//
//   - Bytes overwritten inside a file's durable size are not reverted (the
//     old bytes are not kept). The partition log only appends, except in
//     recovery and truncation, which fsync before going on, and when it
//     rewrites an index or snapshot, which it does through Create (so the
//     whole file counts as unsynced).
//   - A removed name stays removed: Remove is durable at once.
//   - Directories (MkdirAll) are durable at once and never rolled back.
//   - Renames work only within one directory (as in MemFS).
//   - A replaced file larger than 64 MiB, or one that could not be read at
//     the rename, is not written back: only the renamed file moves back.
//   - Only what goes through this FS is tracked: files written by other
//     means are left as they are.
//
// With a random source (CrashOptions.Rand) PowerCut models the contract's
// weaker promise instead of the harshest case: per file a random-length
// prefix of the bytes past its durable size survives, and per directory a
// random-length prefix of its pending name changes.
//
// Safe for concurrent use. Every operation holds a shared lock for its
// duration, which PowerCut takes exclusively, so the rollback runs with no
// operation in flight and every later one fails with ErrPowerCut. Beyond
// that shared lock, reads and writes cost nothing: no allocation, no
// bookkeeping. Sync costs one Size (fstat) and a per-file mutex; name
// operations (Create, OpenReadWrite, Remove, Rename, SyncDir) take one
// mutex of the FS, Create and OpenReadWrite one Stat more, and Rename one
// Stat and, when it replaces a file, a read of that file.
type VolatileFS struct {
	base FS

	// gate is held shared by every operation and exclusively by PowerCut.
	gate sync.RWMutex
	cut  bool // set by PowerCut; guarded by gate

	mu    sync.Mutex          // guards the fields below; held for the whole of a name operation
	files map[string]*volNode // tracked files by clean path
	dirs  map[string][]nameOp // by clean directory path: name changes since its last SyncDir, oldest first
	seq   uint64              // numbers name operations, so SyncDir drops only those before it
}

// volNode is the durability state of one tracked file.
type volNode struct {
	mu     sync.Mutex
	synced int64  // bytes durable: the size as of the last Sync
	gen    uint64 // bumped by each Truncate and truncating Create, so a Sync running across one does not raise synced
}

// nameOp is a name change not yet made durable by SyncDir.
type nameOp struct {
	seq      uint64
	rename   bool   // a rename of name to newName; else the creation of name
	name     string // clean path
	newName  string // clean path; renames only
	replaced bool   // the rename replaced an existing file
	kept     []byte // that file's durable contents; nil when not kept
}

// NewVolatile wraps base. The rollback of PowerCut writes through base too,
// so faults injected below it should be cleared before cutting.
func NewVolatile(base FS) *VolatileFS {
	return &VolatileFS{base: base, files: map[string]*volNode{}, dirs: map[string][]nameOp{}}
}

// enter takes the shared lock, or returns ErrPowerCut after PowerCut.
func (v *VolatileFS) enter(op, name string) error {
	v.gate.RLock()
	if v.cut {
		v.gate.RUnlock()
		return &fs.PathError{Op: op, Path: name, Err: ErrPowerCut}
	}
	return nil
}

func (v *VolatileFS) leave() { v.gate.RUnlock() }

// recordLocked appends a name change to dir's pending list. The caller
// holds mu.
func (v *VolatileFS) recordLocked(dir string, op nameOp) {
	v.seq++
	op.seq = v.seq
	v.dirs[dir] = append(v.dirs[dir], op)
}

// open is Create (trunc) and OpenReadWrite.
func (v *VolatileFS) open(name string, trunc bool) (File, error) {
	if err := v.enter("open", name); err != nil {
		return nil, err
	}
	defer v.leave()
	clean := filepath.Clean(name)
	v.mu.Lock()
	defer v.mu.Unlock()
	fi, statErr := v.base.Stat(clean)
	var f File
	var err error
	if trunc {
		f, err = v.base.Create(name)
	} else {
		f, err = v.base.OpenReadWrite(name)
	}
	if err != nil {
		return nil, err
	}
	n := v.files[clean]
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		n = &volNode{}
		v.files[clean] = n
		v.recordLocked(filepath.Dir(clean), nameOp{name: clean})
	case n == nil:
		n = &volNode{}
		if !trunc && statErr == nil {
			n.synced = fi.Size()
		}
		v.files[clean] = n
	case trunc:
		n.mu.Lock()
		n.synced, n.gen = 0, n.gen+1
		n.mu.Unlock()
	}
	return &volFile{File: f, v: v, node: n, name: name}, nil
}

// Create implements FS.
func (v *VolatileFS) Create(name string) (File, error) { return v.open(name, true) }

// OpenReadWrite implements FS.
func (v *VolatileFS) OpenReadWrite(name string) (File, error) { return v.open(name, false) }

// Open implements FS. The file is read-only, so nothing is tracked.
func (v *VolatileFS) Open(name string) (File, error) {
	if err := v.enter("open", name); err != nil {
		return nil, err
	}
	defer v.leave()
	f, err := v.base.Open(name)
	if err != nil {
		return nil, err
	}
	return &volFile{File: f, v: v, name: name}, nil
}

// Remove implements FS. The removal is durable at once.
func (v *VolatileFS) Remove(name string) error {
	if err := v.enter("remove", name); err != nil {
		return err
	}
	defer v.leave()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.base.Remove(name); err != nil {
		return err
	}
	delete(v.files, filepath.Clean(name))
	return nil
}

// Rename implements FS. Both names must be in the same directory.
func (v *VolatileFS) Rename(oldname, newname string) error {
	if err := v.enter("rename", oldname); err != nil {
		return err
	}
	defer v.leave()
	oldClean, newClean := filepath.Clean(oldname), filepath.Clean(newname)
	if filepath.Dir(oldClean) != filepath.Dir(newClean) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errors.New("vfs: VolatileFS renames only within a directory")}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	op := nameOp{rename: true, name: oldClean, newName: newClean}
	if _, err := v.base.Stat(newClean); err == nil {
		op.replaced = true
		op.kept = v.durableContentsLocked(newClean)
	}
	if err := v.base.Rename(oldname, newname); err != nil {
		return err
	}
	if n := v.files[oldClean]; n != nil {
		v.files[newClean] = n
	} else {
		delete(v.files, newClean)
	}
	delete(v.files, oldClean)
	v.recordLocked(filepath.Dir(newClean), op)
	return nil
}

// durableContentsLocked reads what of name is durable, or returns nil when
// it is too large or cannot be read. The caller holds mu.
func (v *VolatileFS) durableContentsLocked(name string) []byte {
	f, err := v.base.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil
	}
	if n := v.files[name]; n != nil {
		n.mu.Lock()
		size = min(size, n.synced)
		n.mu.Unlock()
	}
	if size > maxKeptReplaced {
		return nil
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return b
}

// MkdirAll implements FS. Directories are durable at once.
func (v *VolatileFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := v.enter("mkdir", dir); err != nil {
		return err
	}
	defer v.leave()
	return v.base.MkdirAll(dir, perm)
}

// ReadDir implements FS.
func (v *VolatileFS) ReadDir(dir string) ([]string, error) {
	if err := v.enter("readdir", dir); err != nil {
		return nil, err
	}
	defer v.leave()
	return v.base.ReadDir(dir)
}

// Stat implements FS.
func (v *VolatileFS) Stat(name string) (os.FileInfo, error) {
	if err := v.enter("stat", name); err != nil {
		return nil, err
	}
	defer v.leave()
	return v.base.Stat(name)
}

// SyncDir implements FS: the name changes in dir made before it was called
// become durable.
func (v *VolatileFS) SyncDir(dir string) error {
	if err := v.enter("syncdir", dir); err != nil {
		return err
	}
	defer v.leave()
	clean := filepath.Clean(dir)
	v.mu.Lock()
	before := v.seq
	v.mu.Unlock()
	if err := v.base.SyncDir(dir); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	ops := v.dirs[clean]
	i := 0
	for i < len(ops) && ops[i].seq <= before {
		i++
	}
	if i == len(ops) {
		delete(v.dirs, clean)
	} else {
		v.dirs[clean] = ops[i:]
	}
	return nil
}

// PowerCut makes every operation from now on fail with ErrPowerCut, waits
// for those in flight, then rolls the files and directories back to what
// the disk could hold after a power loss at this instant (see VolatileFS
// for the model; with opts.Rand nil, all that is not durable is dropped)
// and makes the rollback durable. The caller is then expected to end the
// process at once (SIGKILL), so that nothing outside this FS writes on. It
// returns the errors met while rolling back, joined; the rollback goes on
// past them. A second call does nothing and returns nil.
func (v *VolatileFS) PowerCut(opts CrashOptions) error {
	v.gate.Lock()
	defer v.gate.Unlock()
	if v.cut {
		return nil
	}
	v.cut = true
	v.mu.Lock()
	defer v.mu.Unlock()
	var errs []error
	note := func(what string, err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("vfs: power cut: %s: %w", what, err))
		}
	}
	// Sorted, so that a seeded source gives the same outcome again.
	for _, dir := range slices.Sorted(maps.Keys(v.dirs)) {
		ops := v.dirs[dir]
		keep := 0
		if opts.Rand != nil {
			keep = opts.Rand.IntN(len(ops) + 1)
		}
		for i := len(ops) - 1; i >= keep; i-- {
			v.undoLocked(ops[i], note)
		}
		note("sync "+dir, v.base.SyncDir(dir))
	}
	for _, name := range slices.Sorted(maps.Keys(v.files)) {
		n := v.files[name]
		fi, err := v.base.Stat(name)
		if err != nil {
			note("stat "+name, err)
			continue
		}
		n.mu.Lock()
		keep := n.synced
		n.mu.Unlock()
		if size := fi.Size(); size > keep && opts.Rand != nil {
			keep += opts.Rand.Int64N(size - keep + 1)
		}
		if fi.Size() <= keep {
			continue
		}
		f, err := v.base.OpenReadWrite(name)
		if err != nil {
			note("open "+name, err)
			continue
		}
		err = f.Truncate(keep)
		if err == nil {
			err = f.Sync()
		}
		note("truncate "+name, errors.Join(err, f.Close()))
	}
	v.files, v.dirs = nil, nil
	return errors.Join(errs...)
}

// undoLocked reverts one name change. The caller holds gate exclusively
// and mu.
func (v *VolatileFS) undoLocked(op nameOp, note func(string, error)) {
	if !op.rename {
		note("remove "+op.name, v.base.Remove(op.name))
		delete(v.files, op.name)
		return
	}
	if _, err := v.base.Stat(op.newName); err == nil {
		note("rename back "+op.newName, v.base.Rename(op.newName, op.name))
		if n := v.files[op.newName]; n != nil {
			v.files[op.name] = n
		}
		delete(v.files, op.newName)
	}
	if op.replaced && op.kept != nil {
		f, err := v.base.Create(op.newName)
		if err != nil {
			note("restore "+op.newName, err)
			return
		}
		_, err = f.Write(op.kept)
		if err == nil {
			err = f.Sync()
		}
		note("restore "+op.newName, errors.Join(err, f.Close()))
	}
}

// volFile is a file of a VolatileFS.
type volFile struct {
	File
	v    *VolatileFS
	node *volNode // nil for a read-only file
	name string
}

func (f *volFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.v.enter("read", f.name); err != nil {
		return 0, err
	}
	defer f.v.leave()
	return f.File.ReadAt(p, off)
}

func (f *volFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.v.enter("write", f.name); err != nil {
		return 0, err
	}
	defer f.v.leave()
	return f.File.WriteAt(p, off)
}

func (f *volFile) Write(p []byte) (int, error) {
	if err := f.v.enter("write", f.name); err != nil {
		return 0, err
	}
	defer f.v.leave()
	return f.File.Write(p)
}

// Sync makes the file durable up to the size it had when Sync was called.
func (f *volFile) Sync() error {
	if err := f.v.enter("sync", f.name); err != nil {
		return err
	}
	defer f.v.leave()
	if f.node == nil {
		return f.File.Sync()
	}
	f.node.mu.Lock()
	gen := f.node.gen
	f.node.mu.Unlock()
	size, err := f.File.Size()
	if err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.node.mu.Lock()
	if f.node.gen == gen {
		f.node.synced = max(f.node.synced, size)
	}
	f.node.mu.Unlock()
	return nil
}

func (f *volFile) Truncate(size int64) error {
	if err := f.v.enter("truncate", f.name); err != nil {
		return err
	}
	defer f.v.leave()
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	if f.node != nil {
		f.node.mu.Lock()
		f.node.synced, f.node.gen = min(f.node.synced, size), f.node.gen+1
		f.node.mu.Unlock()
	}
	return nil
}

func (f *volFile) Size() (int64, error) {
	if err := f.v.enter("size", f.name); err != nil {
		return 0, err
	}
	defer f.v.leave()
	return f.File.Size()
}

// Close closes the file. After PowerCut it still releases the descriptor,
// and returns ErrPowerCut.
func (f *volFile) Close() error {
	f.v.gate.RLock()
	defer f.v.gate.RUnlock()
	err := f.File.Close()
	if f.v.cut {
		return &fs.PathError{Op: "close", Path: f.name, Err: ErrPowerCut}
	}
	return err
}
