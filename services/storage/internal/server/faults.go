package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/strata-mq/strata/lib/vfs"
)

// diskFaults is the disk of a storage process started with
// --fault-injection, for fault tests only: the replicas' logs run over a
// vfs.VolatileFS over a vfs.InjectFS over the OS, and the admin endpoints
// (routes) arm I/O errors and cut the power. A nil *diskFaults is the
// switch off: FS is vfs.Default and there are no endpoints. Safe for
// concurrent use.
type diskFaults struct {
	inject *vfs.InjectFS
	vol    *vfs.VolatileFS
	logger *slog.Logger
	// kill ends the process once the power is cut; killSelf in a real
	// process.
	kill func()
}

// newDiskFaults returns the faulty disk of a process, with kill called
// after a power cut.
func newDiskFaults(logger *slog.Logger, kill func()) *diskFaults {
	inj := vfs.Inject(vfs.Default)
	return &diskFaults{inject: inj, vol: vfs.NewVolatile(inj), logger: logger, kill: kill}
}

// killSelf sends SIGKILL to this process, so that nothing runs after a
// power cut: no shutdown hook, no deferred write.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// FS is the filesystem the node's replicas use: vfs.Default when d is nil.
func (d *diskFaults) FS() vfs.FS {
	if d == nil {
		return vfs.Default
	}
	return d.vol
}

// faultErrors are the errors a fault can return, by the name the endpoint
// takes.
var faultErrors = map[string]syscall.Errno{"EIO": syscall.EIO, "ENOSPC": syscall.ENOSPC}

// faultRequest is the body of POST /debug/faults.
type faultRequest struct {
	Op    string `json:"op"`    // a vfs.Op name: write, sync, syncdir, create, rename, truncate, remove, read
	Path  string `json:"path"`  // names containing it; "" matches every name
	Err   string `json:"err"`   // EIO or ENOSPC; "" is EIO
	Count int    `json:"count"` // how many times it fires; 0 until cleared
}

// faultView is one armed fault in the answers.
type faultView struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Err   string `json:"err"`
	Count int    `json:"count"` // 0: fires until cleared
	Fired int    `json:"fired"` // times it fired
	Spent bool   `json:"spent"` // fired count times; fires no more
}

// faultList is the answer of every /debug/faults call but the power cut.
type faultList struct {
	Faults []faultView `json:"faults"`
	Fired  int         `json:"fired"` // times any fault fired, cleared ones included
}

// routes are the admin endpoints, by http.ServeMux pattern:
//
//	POST   /debug/faults            arm {"op","path","err","count"}; 200 and the list
//	GET    /debug/faults            200 and the list: each fault and how often it fired
//	DELETE /debug/faults            disarm every fault; 200 and the (empty) list
//	POST   /debug/faults/power-cut  202, then PowerCut and SIGKILL; ?seed=N keeps
//	                                a seeded random prefix of what was not durable
//
// Errors are one plain-text line: 400 for a bad request.
func (d *diskFaults) routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /debug/faults":           http.HandlerFunc(d.arm),
		"GET /debug/faults":            http.HandlerFunc(d.list),
		"DELETE /debug/faults":         http.HandlerFunc(d.clear),
		"POST /debug/faults/power-cut": http.HandlerFunc(d.powerCut),
	}
}

func (d *diskFaults) arm(w http.ResponseWriter, r *http.Request) {
	var req faultRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "bad fault: "+oneLine(err.Error()), http.StatusBadRequest)
		return
	}
	ft, err := req.fault()
	if err != nil {
		http.Error(w, "bad fault: "+err.Error(), http.StatusBadRequest)
		return
	}
	d.inject.Add(ft)
	d.logger.Warn("disk fault armed", "op", req.Op, "path", req.Path, "err", ft.Err, "count", req.Count)
	d.list(w, r)
}

// fault checks the request and turns it into a vfs.Fault.
func (req faultRequest) fault() (vfs.Fault, error) {
	op, err := vfs.ParseOp(req.Op)
	if err != nil {
		return vfs.Fault{}, fmt.Errorf("op %q: want write, sync, syncdir, create, rename, truncate, remove or read", req.Op)
	}
	name := req.Err
	if name == "" {
		name = "EIO"
	}
	errno, ok := faultErrors[name]
	if !ok {
		return vfs.Fault{}, fmt.Errorf("err %q: want EIO or ENOSPC", req.Err)
	}
	if req.Count < 0 {
		return vfs.Fault{}, fmt.Errorf("count %d: want 0 (until cleared) or more", req.Count)
	}
	return vfs.Fault{Op: op, Path: req.Path, Err: errno, Count: req.Count, Sticky: req.Count == 0}, nil
}

func (d *diskFaults) list(w http.ResponseWriter, _ *http.Request) {
	out := faultList{Faults: []faultView{}, Fired: d.inject.Fired()}
	for _, f := range d.inject.Faults() {
		v := faultView{Op: f.Op.String(), Path: f.Path, Count: f.Count, Fired: f.Fired, Spent: f.Spent}
		for name, errno := range faultErrors {
			if errors.Is(f.Err, errno) {
				v.Err = name
			}
		}
		out.Faults = append(out.Faults, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

func (d *diskFaults) clear(w http.ResponseWriter, r *http.Request) {
	d.inject.Clear()
	d.logger.Warn("disk faults cleared")
	d.list(w, r)
}

// powerCut answers 202 and flushes the answer, then cuts the power and
// kills the process. The client may see the connection drop instead of
// the answer: the kill can win the race with the answer's bytes.
func (d *diskFaults) powerCut(w http.ResponseWriter, r *http.Request) {
	opts := vfs.CrashOptions{}
	if s := r.URL.Query().Get("seed"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad seed %q: want an unsigned integer", s), http.StatusBadRequest)
			return
		}
		opts.Rand = rand.New(rand.NewPCG(seed, seed))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintln(w, "cutting the power")
	_ = http.NewResponseController(w).Flush()
	// The rollback writes through the injector: no armed fault may fail it.
	d.inject.Clear()
	d.logger.Warn("power cut: dropping what is not durable, then SIGKILL")
	if err := d.vol.PowerCut(opts); err != nil {
		d.logger.Error("power cut: rollback incomplete", "err", err)
	}
	d.kill()
}

// oneLine joins the lines of s, for error answers of one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
