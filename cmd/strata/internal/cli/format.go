package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mq/strata/client"
)

// A format is a sequence of fields (%k, %v, ...) and literal text, with
// the escapes \t \n \r \\ and %% for a literal percent sign.
type formatPart struct {
	field   byte   // 0 for a literal
	literal []byte // for a literal
}

// parseFormat parses a format string; allowed lists the field letters the
// command understands.
func parseFormat(s, allowed string) ([]formatPart, error) {
	var parts []formatPart
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			parts = append(parts, formatPart{literal: lit})
			lit = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 't':
				lit = append(lit, '\t')
			case 'n':
				lit = append(lit, '\n')
			case 'r':
				lit = append(lit, '\r')
			case '\\':
				lit = append(lit, '\\')
			default:
				return nil, fmt.Errorf("unknown escape \\%c in format %q", s[i], s)
			}
		case c == '%' && i+1 < len(s):
			i++
			if s[i] == '%' {
				lit = append(lit, '%')
				continue
			}
			if !strings.ContainsRune(allowed, rune(s[i])) {
				return nil, fmt.Errorf("unknown field %%%c in format %q (allowed: %s)", s[i], s, fieldList(allowed))
			}
			flush()
			parts = append(parts, formatPart{field: s[i]})
		case c == '%' || c == '\\':
			return nil, fmt.Errorf("format %q ends in a lone %c", s, c)
		default:
			lit = append(lit, c)
		}
	}
	flush()
	return parts, nil
}

func fieldList(allowed string) string {
	var fs []string
	for _, c := range allowed {
		fs = append(fs, "%"+string(c))
	}
	return strings.Join(fs, " ")
}

// inputFormat splits stdin into records for produce.
type inputFormat struct {
	parts []formatPart
}

// newInputFormat parses a produce format: %k and %v, each at most once,
// separated by literal text. A format that does not end in a literal ends
// at a newline.
func newInputFormat(s string) (*inputFormat, error) {
	parts, err := parseFormat(s, "kv")
	if err != nil {
		return nil, err
	}
	seen := map[byte]bool{}
	for i, p := range parts {
		if p.field == 0 {
			continue
		}
		if seen[p.field] {
			return nil, fmt.Errorf("format %q uses %%%c twice", s, p.field)
		}
		seen[p.field] = true
		if i+1 < len(parts) && parts[i+1].field != 0 {
			return nil, fmt.Errorf("format %q needs a separator between %%%c and %%%c", s, p.field, parts[i+1].field)
		}
	}
	if !seen['v'] {
		return nil, fmt.Errorf("format %q has no %%v", s)
	}
	if parts[len(parts)-1].field != 0 {
		parts = append(parts, formatPart{literal: []byte("\n")})
	}
	return &inputFormat{parts: parts}, nil
}

func (f *inputFormat) hasKey() bool {
	for _, p := range f.parts {
		if p.field == 'k' {
			return true
		}
	}
	return false
}

// errNoRecord is returned at a clean end of input.
var errNoRecord = io.EOF

// read reads one record's key and value. A last record without its final
// separator is still returned; at the end of the input it returns io.EOF.
func (f *inputFormat) read(r *bufio.Reader) (key, value []byte, err error) {
	started := false
	for i := 0; i < len(f.parts); i++ {
		p := f.parts[i]
		if p.field == 0 {
			// A literal before the first field.
			if err := expect(r, p.literal); err != nil {
				if err == io.EOF && !started {
					return nil, nil, errNoRecord
				}
				return nil, nil, err
			}
			started = true
			continue
		}
		sep := f.parts[i+1].literal // formats end in a literal; fields never touch
		term := f.parts[len(f.parts)-1].literal
		b, which, err := readUntil(r, sep, term)
		if err != nil {
			return nil, nil, err
		}
		found := which == 0
		if which == 1 && i+1 != len(f.parts)-1 {
			// The record ended before this field's separator.
			return nil, nil, &badRecordError{fmt.Sprintf("record does not match the format: no %q before %q", sep, term)}
		}
		if !found {
			if !started && len(b) == 0 {
				return nil, nil, errNoRecord
			}
			if i+1 != len(f.parts)-1 {
				return nil, nil, fmt.Errorf("input ends inside a record (expected %q)", sep)
			}
		}
		started = true
		if p.field == 'k' {
			key = b
		} else {
			value = b
		}
		i++ // the separator is consumed
	}
	return key, value, nil
}

// expect consumes a literal.
func expect(r *bufio.Reader, lit []byte) error {
	for _, c := range lit {
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		if b != c {
			return fmt.Errorf("input does not match the format: expected %q", lit)
		}
	}
	return nil
}

// readUntil reads up to and including the first of the separators and
// returns what came before it and which one ended it (-1 when the input
// ended first).
func readUntil(r *bufio.Reader, seps ...[]byte) (b []byte, which int, err error) {
	for {
		c, err := r.ReadByte()
		if err == io.EOF {
			return b, -1, nil
		}
		if err != nil {
			return nil, -1, err
		}
		b = append(b, c)
		for i, sep := range seps {
			if len(sep) > 0 && bytes.HasSuffix(b, sep) {
				return b[:len(b)-len(sep)], i, nil
			}
		}
	}
}

// badRecordError is one input record that does not match the format; the
// record is reported and skipped.
type badRecordError struct{ msg string }

func (e *badRecordError) Error() string { return e.msg }

// outputFormat prints consumed records.
type outputFormat struct {
	parts []formatPart
}

// newOutputFormat parses a consume format: %t topic, %p partition, %o
// offset, %k key, %v value, %h headers (k=v, comma separated), %T
// timestamp in Unix ms.
func newOutputFormat(s string) (*outputFormat, error) {
	parts, err := parseFormat(s, "tpokvhT")
	if err != nil {
		return nil, err
	}
	return &outputFormat{parts: parts}, nil
}

func (f *outputFormat) write(w io.Writer, r *client.Record) error {
	var b []byte
	for _, p := range f.parts {
		switch p.field {
		case 0:
			b = append(b, p.literal...)
		case 't':
			b = append(b, r.Topic...)
		case 'p':
			b = strconv.AppendInt(b, int64(r.Partition), 10)
		case 'o':
			b = strconv.AppendInt(b, r.Offset, 10)
		case 'k':
			b = append(b, r.Key...)
		case 'v':
			b = append(b, r.Value...)
		case 'T':
			b = strconv.AppendInt(b, r.Timestamp.UnixMilli(), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, h.Key...)
				b = append(b, '=')
				b = append(b, h.Value...)
			}
		}
	}
	_, err := w.Write(b)
	return err
}

// recordJSON is the shape of `consume -f json`, one object per line.
type recordJSON struct {
	Topic     string         `json:"topic"`
	Partition int32          `json:"partition"`
	Offset    int64          `json:"offset"`
	Timestamp int64          `json:"timestamp"`
	Key       any            `json:"key"`
	Value     any            `json:"value"`
	Headers   map[string]any `json:"headers"`
}

func toJSON(r *client.Record) recordJSON {
	j := recordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(),
		Key: bytesJSON(r.Key), Value: bytesJSON(r.Value), Headers: map[string]any{}}
	for _, h := range r.Headers {
		j.Headers[h.Key] = bytesJSON(h.Value)
	}
	return j
}

// parseStart parses -o: start, end, OFFSET, -N (N before the end) or
// @UNIX_MS.
func parseStart(s string) (client.Offset, error) {
	switch s {
	case "start", "beginning", "earliest":
		return client.StartOffset(), nil
	case "end", "latest":
		return client.EndOffset(), nil
	}
	if ms, ok := strings.CutPrefix(s, "@"); ok {
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return client.Offset{}, fmt.Errorf("-o @%s: not a Unix time in milliseconds", ms)
		}
		return client.AtTimestamp(time.UnixMilli(v)), nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return client.Offset{}, errors.New("-o must be start, end, an offset, -N (N before the end) or @UNIX_MS, not " + strconv.Quote(s))
	}
	if v < 0 {
		return client.EndOffsetMinus(-v), nil
	}
	return client.AtOffset(v), nil
}
