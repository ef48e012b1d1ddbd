package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"unicode/utf8"
)

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table prints aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, h := range header {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, h)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// bytesJSON renders a key, value or header value for JSON output: null for
// nil, the text when it is valid UTF-8, else {"base64": "..."}, an object
// so it cannot be mistaken for a text value.
func bytesJSON(b []byte) any {
	if b == nil {
		return nil
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return map[string]string{"base64": base64.StdEncoding.EncodeToString(b)}
}

func int32s(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}

func joinInt32(v []int32) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(x)
	}
	return s
}
