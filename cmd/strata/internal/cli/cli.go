// Package cli implements the strata command line: a small hand-written
// dispatcher over the standard library's flag package (no framework: the
// commands are few, and the contract in docs/cli.md wants exact control of
// flags, help and one-line errors).
//
// Commands live in one table (commands.go). Register adds a top-level
// command from another package, which is how `strata dev`
// (internal/devcluster) plugs in without this package importing it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/strata-mq/strata/lib/serve"
)

// DefaultGateway is used when neither --gateway nor STRATA_GATEWAY is set.
const DefaultGateway = "http://127.0.0.1:9092"

// Command is one command or command group.
type Command struct {
	// Name is the word that selects the command.
	Name string
	// Summary is one line for the command list.
	Summary string
	// Sub are the subcommands of a group (topic, group, cluster).
	Sub []*Command
	// Run runs a built-in command with the arguments after its name.
	Run func(ctx context.Context, e *Env, args []string) error
	// Main runs an external command (such as `strata dev`) with the
	// arguments after its name and returns the exit code. Global flags
	// given before the command name are not passed on.
	Main func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// Env is what a command runs with.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Gateway is the gateway base URL (--gateway, STRATA_GATEWAY or
	// DefaultGateway).
	Gateway string
	// Output is "text" or "json" (--output).
	Output string
	// Path is the command path, for help and error hints ("strata topic create").
	Path string

	gatewaySet bool
	creds      credentials // --token, --tls-ca, --tls-cert, --tls-key (credentials.go)
	tr         *transport  // built from creds once the command's flags are parsed
}

var (
	registryMu sync.Mutex
	extra      []*Command
)

// Register adds a top-level command, for commands implemented outside this
// package (strata dev). It panics when the name is taken.
func Register(c *Command) {
	registryMu.Lock()
	defer registryMu.Unlock()
	for _, have := range allCommands() {
		if have.Name == c.Name {
			panic("cli: command " + c.Name + " registered twice")
		}
	}
	extra = append(extra, c)
}

func allCommands() []*Command {
	cs := append(builtin(), extra...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs
}

// exit codes
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errHelp means --help was asked for and printed.
var errHelp = errors.New("help")

// Main runs the command line args (without the program name) and returns
// the exit code: 0 on success, 1 when the command failed, 2 for a usage
// error. Failures are one line on stderr.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = os.Getenv
	}
	// Stderr gets lines from the client's goroutines too (waiting.go).
	e := &Env{Stdin: stdin, Stdout: stdout, Stderr: &lockedWriter{w: stderr}, Gateway: DefaultGateway, Output: "text", Path: "strata"}
	if g := getenv("STRATA_GATEWAY"); g != "" {
		e.Gateway = g
	}
	e.creds.fromEnv(getenv)
	cmds := allCommands()
	var group *Command
	for {
		rest, err := e.globals(args)
		if err != nil {
			return e.fail(err)
		}
		args = rest
		list := cmds
		if group != nil {
			list = group.Sub
		}
		if len(args) == 0 {
			printCommands(e.Stderr, e.Path, list)
			return exitUsage
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			printCommands(e.Stdout, e.Path, list)
			return exitOK
		}
		var cmd *Command
		for _, c := range list {
			if c.Name == args[0] {
				cmd = c
			}
		}
		if cmd == nil {
			return e.fail(usagef("unknown command %q (see '%s --help')", args[0], e.Path))
		}
		e.Path += " " + cmd.Name
		args = args[1:]
		switch {
		case cmd.Main != nil:
			return cmd.Main(ctx, args, e.Stdout, e.Stderr)
		case cmd.Run != nil:
			stopTracing := startTracing(ctx, e) // telemetry.go
			err := cmd.Run(ctx, e, args)
			stopTracing()
			e.closeTransport()
			if errors.Is(err, errHelp) {
				return exitOK
			}
			if err != nil {
				return e.fail(err)
			}
			return exitOK
		}
		group = cmd
	}
}

// globals consumes the global flags in front of a command name.
func (e *Env) globals(args []string) ([]string, error) {
	for len(args) > 0 {
		a := args[0]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "gateway" && name != "output" && !isCredentialFlag(name)) {
			return args, nil
		}
		if !hasVal {
			if len(args) < 2 {
				return nil, usagef("flag --%s needs a value", name)
			}
			val, args = args[1], args[2:]
		} else {
			args = args[1:]
		}
		if err := e.setGlobal(name, val); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func (e *Env) setGlobal(name, val string) error {
	switch name {
	case "gateway":
		e.Gateway, e.gatewaySet = val, true
	case "output":
		if val != "text" && val != "json" {
			return usagef("--output must be text or json, not %q", val)
		}
		e.Output = val
	default:
		if isCredentialFlag(name) {
			e.creds.set(name, val)
		}
	}
	return nil
}

// gatewayURL is the gateway address with a scheme and no trailing slash.
func (e *Env) gatewayURL() string { return serve.NormalizeURL(e.Gateway) }

// fail prints err as one line and returns its exit code.
func (e *Env) fail(err error) int {
	fmt.Fprintln(e.Stderr, "strata: "+e.explain(err))
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

func printCommands(w io.Writer, path string, cmds []*Command) {
	fmt.Fprintf(w, "Usage: %s COMMAND [FLAGS]\n\nCommands:\n", path)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nGlobal flags (before or after the command):\n%s\nRun '%s COMMAND --help' for a command's flags and an example.\n", globalHelp, path)
}

// globalHelp never shows a credential's value, only where it comes from.
const globalHelp = `  --gateway URL        gateway base URL (default $STRATA_GATEWAY, else ` + DefaultGateway + `)
  --output text|json   output format (default text)
  --token TOKEN        bearer token sent on every call (default $STRATA_TOKEN)
  --tls-ca FILE        PEM CA bundle that verifies the cluster's https:// servers (default $STRATA_TLS_CA)
  --tls-cert FILE      PEM client certificate; the cluster knows you as User:<its CN> (default $STRATA_TLS_CERT)
  --tls-key FILE       private key of --tls-cert (default $STRATA_TLS_KEY)
`
