package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ErrClosed is returned by operations on a closed MemFS file.
var ErrClosed = errors.New("vfs: file already closed")

// MemFS is an in-memory filesystem that remembers what has been made
// durable, so that Crash can produce the filesystem a power loss would
// leave behind. It is safe for concurrent use.
//
// The model, kept simple but honest:
//
//   - Each file (inode) keeps its current bytes and the bytes as of its
//     last Sync. Bytes written or truncated since then are "unsynced".
//   - Each directory keeps the set of names as of its last SyncDir and the
//     ordered list of name operations (create, rename, remove) since.
//   - MkdirAll is durable at once; directories are never removed.
//   - Rename only works within one directory.
//
// Crash keeps every synced byte and every synced name. Of the unsynced
// state it keeps, per file, a random-length prefix of the changed region
// (a torn write: the first n unsynced bytes reached the disk, the rest did
// not, and old bytes past them survive), and per directory a random-length
// prefix of the pending name operations, applied in order. With no random
// source it drops all unsynced state.
type MemFS struct {
	mu   sync.Mutex
	dirs map[string]*memDir
}

type memDir struct {
	live    map[string]*memNode // names as they are now
	durable map[string]*memNode // names as of the last SyncDir
	pending []dirOp             // name changes since the last SyncDir, in order
}

type dirOp struct {
	name    string   // the name created, removed, or renamed from
	newName string   // rename: the destination
	node    *memNode // create: the new inode
	kind    byte     // 'c' create, 'r' remove, 'm' rename
}

type memNode struct {
	mu        sync.RWMutex
	data      []byte // current contents
	synced    []byte // contents as of the last Sync
	dirtyFrom int    // first byte that differs from synced; len(data) and len(synced) when clean
	modTime   time.Time
}

// NewMem returns an empty in-memory filesystem whose root directory "/"
// and current directory "." exist.
func NewMem() *MemFS {
	m := &MemFS{dirs: map[string]*memDir{}}
	m.dirs["/"] = newMemDir()
	m.dirs["."] = newMemDir()
	return m
}

func newMemDir() *memDir {
	return &memDir{live: map[string]*memNode{}, durable: map[string]*memNode{}}
}

func (m *MemFS) lookupDir(name string) (*memDir, string, error) {
	name = filepath.Clean(name)
	dir, base := filepath.Dir(name), filepath.Base(name)
	d, ok := m.dirs[dir]
	if !ok {
		return nil, "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return d, base, nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookupDir(name)
	if err != nil {
		return nil, err
	}
	if n, ok := d.live[base]; ok {
		n.mu.Lock()
		n.truncate(0)
		n.mu.Unlock()
		return &memFile{node: n, name: name}, nil
	}
	return &memFile{node: d.create(base), name: name}, nil
}

func (d *memDir) create(base string) *memNode {
	n := &memNode{modTime: time.Now()}
	d.live[base] = n
	d.pending = append(d.pending, dirOp{kind: 'c', name: base, node: n})
	return n
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookupDir(name)
	if err != nil {
		return nil, err
	}
	n, ok := d.live[base]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{node: n, name: name, readOnly: true}, nil
}

// OpenReadWrite implements FS.
func (m *MemFS) OpenReadWrite(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookupDir(name)
	if err != nil {
		return nil, err
	}
	n, ok := d.live[base]
	if !ok {
		n = d.create(base)
	}
	return &memFile{node: n, name: name}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookupDir(name)
	if err != nil {
		return err
	}
	if _, ok := d.live[base]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.live, base)
	d.pending = append(d.pending, dirOp{kind: 'r', name: base})
	return nil
}

// Rename implements FS. Both names must be in the same directory.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, oldBase, err := m.lookupDir(oldname)
	if err != nil {
		return err
	}
	if filepath.Dir(filepath.Clean(oldname)) != filepath.Dir(filepath.Clean(newname)) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errors.New("vfs: MemFS renames only within a directory")}
	}
	newBase := filepath.Base(newname)
	n, ok := d.live[oldBase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	delete(d.live, oldBase)
	d.live[newBase] = n
	d.pending = append(d.pending, dirOp{kind: 'm', name: oldBase, newName: newBase})
	return nil
}

// MkdirAll implements FS. Directories are durable at once.
func (m *MemFS) MkdirAll(dir string, _ os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, ok := m.dirs[d]; ok {
			break
		}
		m.dirs[d] = newMemDir()
		if d == filepath.Dir(d) {
			break
		}
	}
	return nil
}

// ReadDir implements FS. It lists files only.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	names := make([]string, 0, len(d.live))
	for n := range d.live {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.dirs[filepath.Clean(name)]; ok {
		return memInfo{name: filepath.Base(name), dir: true}, nil
	}
	d, base, err := m.lookupDir(name)
	if err != nil {
		return nil, err
	}
	n, ok := d.live[base]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return memInfo{name: base, size: int64(len(n.data)), mod: n.modTime}, nil
}

// SyncDir implements FS: it makes the directory's pending name changes
// durable.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: fs.ErrNotExist}
	}
	d.durable = maps2(d.live)
	d.pending = nil
	return nil
}

func maps2(src map[string]*memNode) map[string]*memNode {
	dst := make(map[string]*memNode, len(src))
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// CrashOptions controls MemFS.Crash and VolatileFS.PowerCut.
type CrashOptions struct {
	// Rand chooses how much unsynced state survives. Nil drops all of it:
	// every file reverts to its last Sync and every directory to its last
	// SyncDir (as far as each model can; see MemFS and VolatileFS).
	Rand *rand.Rand
}

// Crash returns a new filesystem as it could be found after a power loss
// at this instant (see MemFS for the model). The receiver is left as it
// is; handles open on it must not be used to judge the crashed state.
func (m *MemFS) Crash(opts CrashOptions) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &MemFS{dirs: map[string]*memDir{}}
	copied := map[*memNode]*memNode{}
	for path, d := range m.dirs {
		names := maps2(d.durable)
		keep := 0
		if opts.Rand != nil {
			keep = opts.Rand.IntN(len(d.pending) + 1)
		}
		for _, op := range d.pending[:keep] {
			switch op.kind {
			case 'c':
				names[op.name] = op.node
			case 'r':
				delete(names, op.name)
			case 'm':
				if n, ok := names[op.name]; ok {
					delete(names, op.name)
					names[op.newName] = n
				}
			}
		}
		nd := newMemDir()
		for name, n := range names {
			c, ok := copied[n]
			if !ok {
				c = n.crashCopy(opts.Rand)
				copied[n] = c
			}
			nd.live[name] = c
			nd.durable[name] = c
		}
		out.dirs[path] = nd
	}
	return out
}

func (n *memNode) crashCopy(r *rand.Rand) *memNode {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var data []byte
	if r == nil || n.clean() {
		data = slices.Clone(n.synced)
	} else {
		// The first k bytes of the changed region [dirtyFrom, len(data))
		// reached the disk; past them the old synced bytes survive.
		k := n.dirtyFrom + r.IntN(len(n.data)-n.dirtyFrom+1)
		data = slices.Clone(n.data[:k])
		if k < len(n.data) && k < len(n.synced) {
			data = append(data, n.synced[k:]...)
		}
	}
	return &memNode{data: data, synced: slices.Clone(data), dirtyFrom: len(data), modTime: n.modTime}
}

func (n *memNode) clean() bool {
	return n.dirtyFrom == len(n.data) && len(n.data) == len(n.synced)
}

// markDirty records that bytes from off on changed. Callers hold n.mu.
func (n *memNode) markDirty(off int) {
	if off < n.dirtyFrom {
		n.dirtyFrom = off
	}
	n.modTime = time.Now()
}

func (n *memNode) truncate(size int) {
	if size < len(n.data) {
		n.data = n.data[:size]
		n.markDirty(size)
	} else if size > len(n.data) {
		old := len(n.data)
		n.data = append(n.data, make([]byte, size-old)...)
		n.markDirty(old)
	}
	if n.dirtyFrom > len(n.data) {
		n.dirtyFrom = len(n.data)
	}
}

func (n *memNode) writeAt(p []byte, off int) {
	if end := off + len(p); end > len(n.data) {
		if end > cap(n.data) {
			grown := make([]byte, end, max(2*cap(n.data), end, 512))
			copy(grown, n.data)
			n.data = grown
		} else {
			n.data = n.data[:end]
		}
	}
	copy(n.data[off:], p)
	n.markDirty(off)
}

func (n *memNode) sync() {
	// Bytes before dirtyFrom are already equal in synced and data.
	from := min(n.dirtyFrom, len(n.synced))
	n.synced = append(n.synced[:from], n.data[from:]...)
	n.dirtyFrom = len(n.data)
}

type memFile struct {
	node     *memNode
	name     string
	readOnly bool
	mu       sync.Mutex // guards pos and closed
	pos      int64      // position used by Write
	closed   bool       // set by Close
}

func (f *memFile) check(write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "use", Path: f.name, Err: ErrClosed}
	}
	if write && f.readOnly {
		return &fs.PathError{Op: "write", Path: f.name, Err: errors.New("vfs: file opened read-only")}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check(false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("vfs: negative offset %d", off)
	}
	f.node.mu.RLock()
	defer f.node.mu.RUnlock()
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check(true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("vfs: negative offset %d", off)
	}
	f.node.mu.Lock()
	f.node.writeAt(p, int(off))
	f.node.mu.Unlock()
	return len(p), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	if err := f.check(true); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node.mu.Lock()
	f.node.writeAt(p, int(f.pos))
	f.node.mu.Unlock()
	f.pos += int64(len(p))
	return len(p), nil
}

func (f *memFile) Sync() error {
	if err := f.check(false); err != nil {
		return err
	}
	f.node.mu.Lock()
	f.node.sync()
	f.node.mu.Unlock()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	if err := f.check(true); err != nil {
		return err
	}
	f.node.mu.Lock()
	f.node.truncate(int(size))
	f.node.mu.Unlock()
	return nil
}

func (f *memFile) Size() (int64, error) {
	if err := f.check(false); err != nil {
		return 0, err
	}
	f.node.mu.RLock()
	defer f.node.mu.RUnlock()
	return int64(len(f.node.data)), nil
}

func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: ErrClosed}
	}
	f.closed = true
	return nil
}

type memInfo struct {
	name string
	size int64
	mod  time.Time
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return i.mod }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
