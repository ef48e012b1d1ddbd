package cli

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// flagSet wraps flag.FlagSet with short and long names for one flag, flags
// after positional arguments (strata topic create NAME -p 3), help with
// defaults and an example, and errors rewritten as one line.
type flagSet struct {
	e       *Env
	fs      *flag.FlagSet
	defs    []flagDef
	usage   string // "strata topic create NAME [-p PARTITIONS] ..."
	summary string
	example string
	help    bool
}

type flagDef struct {
	short, long, meta, usage, def string
}

func newFlags(e *Env, usage, summary, example string) *flagSet {
	f := &flagSet{e: e, fs: flag.NewFlagSet(e.Path, flag.ContinueOnError), usage: usage, summary: summary, example: example}
	f.fs.SetOutput(io.Discard)
	f.fs.BoolVar(&f.help, "h", false, "")
	f.fs.BoolVar(&f.help, "help", false, "")
	f.fs.Func("gateway", "", func(s string) error { return e.setGlobal("gateway", s) })
	f.fs.Func("output", "", func(s string) error { return e.setGlobal("output", s) })
	for name := range credentialEnv {
		f.fs.Func(name, "", func(s string) error { return e.setGlobal(name, s) })
	}
	return f
}

func (f *flagSet) add(d flagDef, bind func(name string)) {
	f.defs = append(f.defs, d)
	for _, n := range []string{d.short, d.long} {
		if n != "" {
			bind(n)
		}
	}
}

func (f *flagSet) String(p *string, short, long, meta, def, usage string) {
	*p = def
	f.add(flagDef{short, long, meta, usage, def}, func(n string) { f.fs.Func(n, usage, func(s string) error { *p = s; return nil }) })
}

func (f *flagSet) Int(p *int, short, long, meta string, def int, usage string) {
	*p = def
	f.add(flagDef{short, long, meta, usage, strconv.Itoa(def)}, func(n string) {
		f.fs.Func(n, usage, func(s string) error {
			v, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("not a whole number")
			}
			*p = v
			return nil
		})
	})
}

func (f *flagSet) Duration(p *time.Duration, short, long, meta string, def time.Duration, usage string) {
	*p = def
	f.add(flagDef{short, long, meta, usage, def.String()}, func(n string) {
		f.fs.Func(n, usage, func(s string) error {
			v, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("not a duration like 30s or 2m")
			}
			*p = v
			return nil
		})
	})
}

func (f *flagSet) Bool(p *bool, short, long, usage string) {
	f.add(flagDef{short, long, "", usage, ""}, func(n string) { f.fs.BoolVar(p, n, *p, usage) })
}

// List is a repeatable flag; every use appends.
func (f *flagSet) List(p *[]string, short, long, meta, usage string) {
	f.add(flagDef{short, long, meta, usage, ""}, func(n string) {
		f.fs.Func(n, usage, func(s string) error { *p = append(*p, s); return nil })
	})
}

// parse parses flags anywhere among the arguments and returns the
// positional ones, which must be exactly the arguments names (in that
// order; names are what the usage error calls a missing one). Everything
// after "--" is positional. With -h or --help it prints the help and
// returns errHelp. Once the flags are parsed it builds the transport from
// the credential flags, whose problems it returns.
func (f *flagSet) parse(args []string, names ...string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				f.printHelp()
				return nil, errHelp
			}
			return nil, usagef("%s (see '%s --help')", rewriteFlagError(err.Error(), args), f.e.Path)
		}
		args = f.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if f.help {
		f.printHelp()
		return nil, errHelp
	}
	pos = append(pos, tail...)
	if err := f.needArgs(pos, names...); err != nil {
		return nil, err
	}
	if err := f.e.prepareTransport(); err != nil {
		return nil, err
	}
	return pos, nil
}

// rewriteFlagError turns the flag package's messages into ours, naming a
// flag as the user spelled it (--name or -name).
func rewriteFlagError(msg string, args []string) string {
	spelled := func(name string) string {
		for _, a := range args {
			if a == "-"+name || a == name || strings.HasPrefix(a, "-"+name+"=") {
				return strings.SplitN(a, "=", 2)[0]
			}
		}
		return name
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag " + spelled(name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "flag " + spelled(name) + " needs a value"
	}
	msg = strings.Replace(msg, " for flag ", " for ", 1)
	return msg
}

func (f *flagSet) printHelp() {
	w := f.e.Stdout
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", f.usage, f.summary)
	if len(f.defs) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		for _, d := range f.defs {
			var names []string
			if d.short != "" {
				names = append(names, "-"+d.short)
			}
			if d.long != "" {
				names = append(names, "--"+d.long)
			}
			left := strings.Join(names, ", ")
			if d.meta != "" {
				left += " " + d.meta
			}
			usage := d.usage
			if d.def != "" {
				usage += " (default " + d.def + ")"
			}
			fmt.Fprintf(w, "  %-28s %s\n", left, usage)
		}
	}
	fmt.Fprintf(w, "\nGlobal flags:\n%s", globalHelp)
	if f.example != "" {
		fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(f.example, "\n", "\n  "))
	}
}

// needArgs checks the number of positional arguments.
func (f *flagSet) needArgs(pos []string, names ...string) error {
	if len(pos) < len(names) {
		return usagef("missing %s (see '%s --help')", names[len(pos)], f.e.Path)
	}
	if len(pos) > len(names) {
		return usagef("unexpected argument %q (see '%s --help')", pos[len(names)], f.e.Path)
	}
	return nil
}
