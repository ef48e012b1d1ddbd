package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTruncated is wrapped by Read's error when the last line of a history
// is cut short, as a run that crashed mid-write leaves it. The events before
// it are returned with the error and are sound: a caller checking a crashed
// run's history may go on with them.
var ErrTruncated = errors.New("history: last line cut short")

// ReadFile reads the history in the file at path (see Read).
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Read(f)
}

// Read parses a history written by a Recorder: one JSON event per line.
// Blank lines are skipped and unknown fields ignored. Each event is
// checked on its own (a known type and F, exactly the payload F names, a
// time) and against the ones before it (indexes increasing, a completion
// naming an earlier invoke of the same process and F that nothing else
// completed, a fault stop naming an earlier start of the same kind). The
// first line that fails stops the read: Read returns the events before it
// and an error naming the line. A last line without its newline that does
// not parse is a crash's torn write: the error wraps ErrTruncated.
func Read(r io.Reader) ([]Event, error) {
	br := bufio.NewReader(r)
	v := validator{open: map[int64]Event{}, faults: map[int64]string{}}
	var events []Event
	for line := 1; ; line++ {
		raw, readErr := br.ReadBytes('\n')
		if readErr != nil && readErr != io.EOF {
			return events, fmt.Errorf("history: line %d: %w", line, readErr)
		}
		torn := readErr == io.EOF && len(raw) > 0
		if len(bytes.TrimSpace(raw)) > 0 {
			var ev Event
			err := json.Unmarshal(raw, &ev)
			if err != nil && torn {
				return events, fmt.Errorf("%w (line %d: %v)", ErrTruncated, line, err)
			}
			if err == nil {
				err = v.check(ev)
			}
			if err != nil {
				return events, fmt.Errorf("history: line %d: %w", line, err)
			}
			events = append(events, ev)
		}
		if readErr == io.EOF {
			return events, nil
		}
	}
}

// validator checks each event against the ones read before it.
type validator struct {
	last   int64           // index of the last event
	open   map[int64]Event // invokes not yet completed, by index
	faults map[int64]string
}

func (v *validator) check(ev Event) error {
	if ev.Index <= v.last {
		return fmt.Errorf("index %d after %d", ev.Index, v.last)
	}
	if ev.Time.IsZero() {
		return fmt.Errorf("event %d: no time", ev.Index)
	}
	if !ev.Op.payloadOK() {
		return fmt.Errorf("event %d: op %q must carry exactly its own payload", ev.Index, ev.F)
	}
	switch ev.Type {
	case Invoke:
		if ev.Invoke != 0 {
			return fmt.Errorf("event %d: an invoke names invoke %d", ev.Index, ev.Invoke)
		}
		if ev.F == FFault {
			return fmt.Errorf("event %d: a fault is a note, not an invoke", ev.Index)
		}
		v.open[ev.Index] = ev
	case Ok, Fail, Info:
		if ev.Invoke == 0 {
			if ev.Type != Ok {
				return fmt.Errorf("event %d: a %s completes no invoke", ev.Index, ev.Type)
			}
			if err := v.checkFault(ev); err != nil {
				return err
			}
			break
		}
		inv, ok := v.open[ev.Invoke]
		if !ok {
			return fmt.Errorf("event %d completes %d, which is no open invoke", ev.Index, ev.Invoke)
		}
		if inv.Process != ev.Process || inv.F != ev.F {
			return fmt.Errorf("event %d: %s %q completes %s %q (event %d)", ev.Index, ev.Process, ev.F, inv.Process, inv.F, inv.Index)
		}
		delete(v.open, ev.Invoke)
	default:
		return fmt.Errorf("event %d: unknown type %q", ev.Index, ev.Type)
	}
	v.last = ev.Index
	return nil
}

func (v *validator) checkFault(ev Event) error {
	if ev.Fault == nil {
		return nil
	}
	switch ev.Fault.Phase {
	case FaultStart:
		v.faults[ev.Index] = ev.Fault.Kind
	case FaultStop:
		kind, ok := v.faults[ev.Fault.Start]
		if !ok || kind != ev.Fault.Kind {
			return fmt.Errorf("event %d stops fault %d, which is no %q fault started before", ev.Index, ev.Fault.Start, ev.Fault.Kind)
		}
		delete(v.faults, ev.Fault.Start)
	default:
		return fmt.Errorf("event %d: unknown fault phase %q", ev.Index, ev.Fault.Phase)
	}
	return nil
}
