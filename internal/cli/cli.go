// Package cli is amilint's command line: flag parsing and wiring of the
// engine's packages, nothing else. Run is the whole program, so every
// command is testable in-process; only main calls os.Exit.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/integrity"
)

// Exit codes, the contract of the README's "Exit codes" table.
const (
	ExitOK       = 0 // nothing at or above --fail-on
	ExitFindings = 1 // findings at or above --fail-on
	ExitError    = 2 // could not do the job: bad flag, unreadable or corrupt input, policy error
)

// Version is set at link time (-ldflags "-X ...cli.Version=v1.2.3"); when
// it is not, version() asks the build info.
var Version = "dev"

// version is the version reports and `amilint version` print: Version when
// set at link time, else the module version `go install …@vX` records, else
// the VCS revision `go build` in a checkout records, else "dev".
func version() string {
	if Version != "dev" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev + dirty
}

// env carries what every command gets.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

// command is one subcommand: it parses its own flags and returns an exit code.
type command struct {
	summary string
	run     func(e *env, args []string) int
}

// commands is the registry of subcommands, an explicit map literal.
func commands() map[string]command {
	return map[string]command{
		"policy":   {"run Rego policy tests: policy test DIR", runPolicy},
		"live":     {"audit the running host: zombie memcgs, crash-looping units, saturated IRQ cores", runLive},
		"scan":     {"audit an image: facts, policies, findings (default TARGET: the embedded DLAMI-like image)", runScan},
		"security": {"score every service's exposure as systemd-analyze security does: security [TARGET] [UNIT...]", runSecurity},
		"facts":    {"print the policy input document of an image", runFacts},
		"diff":     {"compare two images: units enabled, started, masked, removed; findings added and resolved", runDiff},
		"units":    {"list unit files of an image with their state and boot chain", runUnits},
		"fix":      {"disable or mask what policy rejects in an image directory, as systemctl --root would (--dry-run: plan only)", runFix},
		"report":   {"aggregate amilint JSON reports into one rollout report: report FILE...", runReport},
		"version":  {"print the version", runVersion},
	}
}

// Run runs amilint with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return ExitError
		}
		return ExitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "amilint: unknown command %q (see amilint help)\n", args[0])
		return ExitError
	}
	return c.run(e, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: amilint COMMAND [flags] [TARGET]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}

func runVersion(e *env, args []string) int {
	fs := newFlags(e, "version")
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint version")
	}
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("takes no arguments, got %q", pos[0])
	}
	if err != nil {
		return fail(e, "version", err)
	}
	fmt.Fprintln(e.stdout, "amilint", version()+flavor)
	return ExitOK
}

// newFlags returns a FlagSet that returns errors without exiting or
// printing: the command prints one line naming the problem (fail), and its
// usage only when asked with -h (usageOf).
func newFlags(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("amilint "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// flagSet reports whether the flag name was given, empty or not: an empty
// value (an unset variable in a script) is then refused, not read as the
// flag left out.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parse parses args, allowing flags after positional arguments
// ("amilint units DIR -o tsv"), and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// fail prints one line naming the problem and returns ExitError.
func fail(e *env, cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	// A structure that fails its checksum says all in its own line: the
	// format, the structure, where it is, the path being read.
	if m, ok := integrity.As(err); ok {
		err = fmt.Errorf("%w (--allow-corrupt reads on and reports it)", m)
	}
	// One line: multi-line errors (OPA lists every parse error) are joined,
	// and what they quote of a hostile file or name (a policy's source
	// line, a path) reaches the terminal without its control characters.
	msg := finding.Printable(strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ; ")), " "))
	fmt.Fprintf(e.stderr, "amilint %s: %s\n", cmd, msg)
	return ExitError
}
