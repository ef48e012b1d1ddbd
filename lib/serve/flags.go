package serve

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// EnvPrefix is prepended to a flag's name to form its environment variable:
// --node-id is also read from STRATA_NODE_ID.
const EnvPrefix = "STRATA_"

// ErrHelp is returned by [Flags.Parse] when -h, -help or --help was given.
// [Main] prints the usage to stdout and exits 0 on it.
var ErrHelp = flag.ErrHelp

// Flags is the set of command-line flags of one service binary. Each flag
// can also be set through an environment variable named by [EnvName]; the
// precedence is flag on the command line, then environment, then default.
//
// A service declares each config field once, in its RegisterFlags method,
// with the field's pointer, flag name, default and help text, in the style
// of the standard flag package:
//
//	func (c *Config) RegisterFlags(f *serve.Flags) {
//		f.IntVar(&c.NodeID, "node-id", 0, "this storage node's id, unique in the cluster")
//	}
//
// Flags is not safe for concurrent use; it is built and parsed once at start.
type Flags struct {
	program string
	fs      *flag.FlagSet
	order   []string        // flag names in registration order, for usage and logging
	secret  map[string]bool // flags whose value is never printed
}

// NewFlags returns an empty flag set for the binary named program (for
// example "strata-storage"), used in usage text.
func NewFlags(program string) *Flags {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	// Errors are reported by the caller as one line; the flag package must
	// not print its own message or the usage dump.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Flags{program: program, fs: fs, secret: map[string]bool{}}
}

// EnvName returns the environment variable that sets the flag name:
// "node-id" gives "STRATA_NODE_ID".
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// StringVar defines a string flag stored in p with default value.
func (f *Flags) StringVar(p *string, name, value, usage string) {
	f.fs.StringVar(p, name, value, usage)
	f.add(name)
}

// SecretVar defines a string flag whose value is a secret (a password, a
// token, a DSN that carries credentials). It is never printed: usage shows
// no default and the startup log shows "[redacted]" when it is set.
func (f *Flags) SecretVar(p *string, name, value, usage string) {
	f.fs.StringVar(p, name, value, usage)
	f.add(name)
	f.secret[name] = true
}

// BoolVar defines a bool flag stored in p with default value. On the
// command line it is --name or --name=false; in the environment any value
// strconv.ParseBool accepts ("1", "true", "false", ...).
func (f *Flags) BoolVar(p *bool, name string, value bool, usage string) {
	f.fs.BoolVar(p, name, value, usage)
	f.add(name)
}

// IntVar defines an int flag stored in p with default value.
func (f *Flags) IntVar(p *int, name string, value int, usage string) {
	f.fs.IntVar(p, name, value, usage)
	f.add(name)
}

// Int64Var defines an int64 flag stored in p with default value.
func (f *Flags) Int64Var(p *int64, name string, value int64, usage string) {
	f.fs.Int64Var(p, name, value, usage)
	f.add(name)
}

// Float64Var defines a float64 flag stored in p with default value.
func (f *Flags) Float64Var(p *float64, name string, value float64, usage string) {
	f.fs.Float64Var(p, name, value, usage)
	f.add(name)
}

// DurationVar defines a duration flag stored in p with default value;
// values are written as time.ParseDuration reads them ("500ms", "2m").
func (f *Flags) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	f.fs.DurationVar(p, name, value, usage)
	f.add(name)
}

// TextVar defines a flag for any type that reads itself from text, such as
// slog.Level or netip.AddrPort. p holds the value and value is the default.
func (f *Flags) TextVar(p encoding.TextUnmarshaler, name string, value encoding.TextMarshaler, usage string) {
	f.fs.TextVar(p, name, value, usage)
	f.add(name)
}

// Var defines a flag with a custom flag.Value, whose current value at the
// time of the call is the default.
func (f *Flags) Var(v flag.Value, name, usage string) {
	f.fs.Var(v, name, usage)
	f.add(name)
}

func (f *Flags) add(name string) {
	if strings.Contains(name, "_") {
		// --a_b and --a-b would share STRATA_A_B.
		panic(fmt.Sprintf("serve: flag %q: use '-' not '_' in flag names", name))
	}
	f.order = append(f.order, name)
	if looksSecret(name) {
		f.secret[name] = true
	}
}

// Parse reads args (without the program name) and then, for every flag not
// given in args, its environment variable through lookupEnv (nil means no
// environment). It returns [ErrHelp] for -h/--help, and otherwise an error
// whose message is one line naming the flag or variable and the problem.
// Positional arguments are an error: services take flags only.
func (f *Flags) Parse(args []string, lookupEnv func(string) (string, bool)) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ErrHelp
		}
		return errors.New(rewriteFlagError(err.Error()))
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (services take flags only; see --help)", f.fs.Arg(0))
	}
	if lookupEnv == nil {
		return nil
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, name := range f.order {
		if given[name] {
			continue
		}
		env := EnvName(name)
		v, ok := lookupEnv(env)
		if !ok {
			continue
		}
		if err := f.fs.Set(name, v); err != nil {
			shown := fmt.Sprintf("%q", v)
			if f.secret[name] {
				shown = "[redacted]"
			}
			return fmt.Errorf("%s=%s (for --%s): invalid value: %v", env, shown, name, err)
		}
	}
	return nil
}

var (
	reInvalidValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for flag -(\S+): (.*)$`)
	reNotDefined   = regexp.MustCompile(`^flag provided but not defined: -+(\S+)$`)
	reNeedsArg     = regexp.MustCompile(`^flag needs an argument: -+(\S+)$`)
)

// rewriteFlagError turns the flag package's messages into the form used
// for every config problem: `--name "value": reason`.
func rewriteFlagError(msg string) string {
	if m := reInvalidValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s %s: invalid value: %s", m[2], m[1], m[3])
	}
	if m := reNotDefined.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s (see --help)", m[1])
	}
	if m := reNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s: needs a value", m[1])
	}
	return msg
}

// PrintUsage writes the help text: one entry per flag in registration
// order, giving its value type, environment variable, default and help.
// summary, when not empty, is printed first.
func (f *Flags) PrintUsage(w io.Writer, summary string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [flags]\n\n", f.program)
	if summary != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(summary))
	}
	fmt.Fprintf(&b, "Every flag can also be set by the environment variable shown with it.\n")
	fmt.Fprintf(&b, "A flag on the command line wins over the environment, which wins over the default.\n\nFlags:\n")
	for _, name := range f.order {
		fl := f.fs.Lookup(name)
		typ, help := flag.UnquoteUsage(fl)
		fmt.Fprintf(&b, "  --%s", name)
		if typ != "" {
			fmt.Fprintf(&b, " %s", typ)
		}
		fmt.Fprintf(&b, "\n      %s\n", strings.ReplaceAll(help, "\n", "\n      "))
		fmt.Fprintf(&b, "      env %s", EnvName(name))
		switch {
		case f.secret[name]:
			// A secret's default is never shown.
		case fl.DefValue == "":
			fmt.Fprintf(&b, "; default empty")
		default:
			fmt.Fprintf(&b, "; default %s", quoteIfString(fl))
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

func quoteIfString(fl *flag.Flag) string {
	if g, ok := fl.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return fmt.Sprintf("%q", fl.DefValue)
		}
	}
	return fl.DefValue
}

// Attrs returns the resolved value of every flag, in registration order, as
// slog attributes for the one startup log line. Secret flags show
// "[redacted]" when set; passwords inside URLs and key=value DSNs in other
// flags are masked too, so a DSN can be logged safely.
func (f *Flags) Attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, len(f.order))
	for _, name := range f.order {
		fl := f.fs.Lookup(name)
		if f.secret[name] {
			v := ""
			if fl.Value.String() != "" {
				v = "[redacted]"
			}
			attrs = append(attrs, slog.String(name, v))
			continue
		}
		var v any = fl.Value.String()
		if g, ok := fl.Value.(flag.Getter); ok {
			switch x := g.Get().(type) {
			case bool, int, int64, uint, uint64, float64:
				v = x
			}
		}
		if s, ok := v.(string); ok {
			v = Redact(s)
		}
		attrs = append(attrs, slog.Any(name, v))
	}
	return attrs
}

var (
	reSecretName = regexp.MustCompile(`(?i)(password|passwd|secret|token|credential)`)
	reKVSecret   = regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token|sslpassword)=('[^']*'|[^\s&;]+)`)
)

func looksSecret(name string) bool { return reSecretName.MatchString(name) }

// Redact masks credentials in a config value so it can be logged: the
// password of a URL ("postgres://u:pw@host/db" becomes
// "postgres://u:xxxxx@host/db") and password=, token= and secret= pairs of
// key=value DSNs. Other values are returned unchanged.
func Redact(s string) string {
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				s = u.Redacted()
			}
		}
	}
	return reKVSecret.ReplaceAllString(s, "${1}=xxxxx")
}
