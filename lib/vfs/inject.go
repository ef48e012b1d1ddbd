package vfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// ErrInjected is the error an injected fault returns unless it names its
// own.
var ErrInjected = errors.New("vfs: injected error")

// Op names the kind of operation a Fault matches.
type Op uint8

// The operations a fault can target.
const (
	OpWrite    Op = iota + 1 // File.Write and File.WriteAt
	OpSync                   // File.Sync
	OpTruncate               // File.Truncate
	OpRead                   // File.ReadAt
	OpCreate                 // FS.Create and FS.OpenReadWrite
	OpRemove                 // FS.Remove
	OpRename                 // FS.Rename (matched on the old name)
	OpSyncDir                // FS.SyncDir
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpSync:
		return "sync"
	case OpTruncate:
		return "truncate"
	case OpRead:
		return "read"
	case OpCreate:
		return "create"
	case OpRemove:
		return "remove"
	case OpRename:
		return "rename"
	case OpSyncDir:
		return "syncdir"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Fault describes one injected failure. The zero Fault matches nothing.
type Fault struct {
	// Op is the operation that fails.
	Op Op
	// Path restricts the fault to names containing it; "" matches all.
	// A directory ("/data/orders-0") matches itself (SyncDir) and every
	// name under it, but also any name it is part of ("/data/orders-01");
	// with a trailing separator it matches only the names under it.
	Path string
	// After is how many matching operations succeed before the fault
	// fires: 0 fails the first one, 2 the third.
	After int
	// Err is the error returned; nil means ErrInjected.
	Err error
	// Torn applies to OpWrite: the failing write first writes this many
	// bytes of its buffer (capped at its length), like a write cut short
	// by a full disk or a crash. Negative means half the buffer.
	Torn int
	// Count is how many times the fault fires before it is spent; 0
	// means once. Ignored when Sticky.
	Count int
	// Sticky keeps the fault firing on every later match; by default it
	// fires once (or Count times).
	Sticky bool
}

type faultState struct {
	Fault
	seen  int  // matching operations so far
	fired int  // times this fault fired
	spent bool // fired as often as it may
}

// FaultStatus is an armed fault and how it has fared, as Faults reports.
type FaultStatus struct {
	Fault
	// Fired is how many times the fault has fired.
	Fired int
	// Spent is set once a fault that is not Sticky has fired Count times
	// (once when Count is 0): it fires no more.
	Spent bool
}

// ParseOp returns the Op whose String is s ("write", "sync", "truncate",
// "read", "create", "remove", "rename", "syncdir").
func ParseOp(s string) (Op, error) {
	for o := OpWrite; o <= OpSyncDir; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("vfs: unknown operation %q", s)
}

// InjectFS wraps an FS and fails operations as its faults say, in the
// style of pebble's errorfs and franz-go's kfake faults. It is safe for
// concurrent use.
type InjectFS struct {
	fs     FS
	mu     sync.Mutex
	faults []*faultState
	fired  int
}

// Inject wraps fs with the given faults.
func Inject(fs FS, faults ...Fault) *InjectFS {
	f := &InjectFS{fs: fs}
	for _, ft := range faults {
		f.Add(ft)
	}
	return f
}

// Add arms another fault.
func (f *InjectFS) Add(ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &faultState{Fault: ft})
}

// Clear disarms every fault.
func (f *InjectFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Fired reports how many times faults have fired, those cleared since
// included.
func (f *InjectFS) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Faults returns the armed faults in the order they were added, spent
// ones included, until Clear.
func (f *InjectFS) Faults() []FaultStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FaultStatus, len(f.faults))
	for i, ft := range f.faults {
		out[i] = FaultStatus{Fault: ft.Fault, Fired: ft.fired, Spent: ft.spent}
	}
	return out
}

// check returns the fault that fires for this operation, if any.
func (f *InjectFS) check(op Op, name string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ft := range f.faults {
		if ft.spent || ft.Op != op || (ft.Path != "" && !strings.Contains(name, ft.Path)) {
			continue
		}
		ft.seen++
		if ft.seen <= ft.After {
			continue
		}
		ft.fired++
		if !ft.Sticky && ft.fired >= max(ft.Count, 1) {
			ft.spent = true
		}
		f.fired++
		return &ft.Fault
	}
	return nil
}

func (ft *Fault) err(op Op, name string) error {
	err := ft.Err
	if err == nil {
		err = ErrInjected
	}
	return &os.PathError{Op: op.String(), Path: name, Err: err}
}

func (f *InjectFS) wrap(file File, name string, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &injectFile{File: file, fs: f, name: name}, nil
}

// Create implements FS.
func (f *InjectFS) Create(name string) (File, error) {
	if ft := f.check(OpCreate, name); ft != nil {
		return nil, ft.err(OpCreate, name)
	}
	file, err := f.fs.Create(name)
	return f.wrap(file, name, err)
}

// Open implements FS.
func (f *InjectFS) Open(name string) (File, error) {
	file, err := f.fs.Open(name)
	return f.wrap(file, name, err)
}

// OpenReadWrite implements FS.
func (f *InjectFS) OpenReadWrite(name string) (File, error) {
	if ft := f.check(OpCreate, name); ft != nil {
		return nil, ft.err(OpCreate, name)
	}
	file, err := f.fs.OpenReadWrite(name)
	return f.wrap(file, name, err)
}

// Remove implements FS.
func (f *InjectFS) Remove(name string) error {
	if ft := f.check(OpRemove, name); ft != nil {
		return ft.err(OpRemove, name)
	}
	return f.fs.Remove(name)
}

// Rename implements FS.
func (f *InjectFS) Rename(oldname, newname string) error {
	if ft := f.check(OpRename, oldname); ft != nil {
		return ft.err(OpRename, oldname)
	}
	return f.fs.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (f *InjectFS) MkdirAll(dir string, perm os.FileMode) error { return f.fs.MkdirAll(dir, perm) }

// ReadDir implements FS.
func (f *InjectFS) ReadDir(dir string) ([]string, error) { return f.fs.ReadDir(dir) }

// Stat implements FS.
func (f *InjectFS) Stat(name string) (os.FileInfo, error) { return f.fs.Stat(name) }

// SyncDir implements FS.
func (f *InjectFS) SyncDir(dir string) error {
	if ft := f.check(OpSyncDir, dir); ft != nil {
		return ft.err(OpSyncDir, dir)
	}
	return f.fs.SyncDir(dir)
}

type injectFile struct {
	File
	fs   *InjectFS
	name string
}

func (f *injectFile) torn(ft *Fault, p []byte, write func([]byte) (int, error)) (int, error) {
	n := ft.Torn
	if n < 0 {
		n = len(p) / 2
	}
	n = min(n, len(p))
	if n > 0 {
		if w, err := write(p[:n]); err != nil {
			return w, err
		}
	}
	return n, ft.err(OpWrite, f.name)
}

func (f *injectFile) Write(p []byte) (int, error) {
	if ft := f.fs.check(OpWrite, f.name); ft != nil {
		return f.torn(ft, p, f.File.Write)
	}
	return f.File.Write(p)
}

func (f *injectFile) WriteAt(p []byte, off int64) (int, error) {
	if ft := f.fs.check(OpWrite, f.name); ft != nil {
		return f.torn(ft, p, func(b []byte) (int, error) { return f.File.WriteAt(b, off) })
	}
	return f.File.WriteAt(p, off)
}

func (f *injectFile) ReadAt(p []byte, off int64) (int, error) {
	if ft := f.fs.check(OpRead, f.name); ft != nil {
		return 0, ft.err(OpRead, f.name)
	}
	return f.File.ReadAt(p, off)
}

func (f *injectFile) Sync() error {
	if ft := f.fs.check(OpSync, f.name); ft != nil {
		return ft.err(OpSync, f.name)
	}
	return f.File.Sync()
}

func (f *injectFile) Truncate(size int64) error {
	if ft := f.fs.check(OpTruncate, f.name); ft != nil {
		return ft.err(OpTruncate, f.name)
	}
	return f.File.Truncate(size)
}
