// Package systemdtest runs real systemd binaries against test trees, so the
// differential tests of the unit model can ask systemd itself: systemd 252
// from the cached Debian 12 root and systemd 257 from the cached Debian 13
// root (fixtures/testenv finds them). Any binary of such a root runs
// chrooted in it, in a private mount namespace with /proc mounted and the
// test tree bind-mounted inside ([Systemd.Run]); [Systemd.Systemctl] is
// `systemctl --root` on a tree; [Systemd.Boot] is `systemd --test
// --system`, the initial boot transaction of the root with a tree of
// changes stacked over it, and [View] is the same stack for the model.
//
// It is imported only by tests. It needs root (mount namespaces, chroot)
// and never writes to the cached roots: trees are bind-mounted or stacked
// in an overlay that lives only in the namespace of one command.
package systemdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amilint/amilint/fixtures/testenv"
)

// Systemd is one real systemd: a cached Debian root whose binaries run
// against test trees.
type Systemd struct {
	// Version is the systemd version of the root's binaries.
	Version int
	// Root is the cached Debian root.
	Root testenv.DebianRoot
}

// The two systemd versions the differential tests compare against.
var (
	Bookworm = Systemd{Version: 252, Root: testenv.Bookworm}
	Trixie   = Systemd{Version: 257, Root: testenv.Trixie}
)

// Versions returns every systemd the tests compare against, oldest first.
func Versions() []Systemd { return []Systemd{Bookworm, Trixie} }

// Name is the version as a subtest name: "252".
func (s Systemd) Name() string { return fmt.Sprint(s.Version) }

// Tree stands for the test tree in the arguments of Run and Systemctl: it
// is replaced by where the tree is seen (TreeMount in the chroot).
const Tree = "{tree}"

// TreeMount is where Run bind-mounts the test tree inside the root.
const TreeMount = "/mnt"

// Timeout bounds every command this package runs.
const Timeout = 2 * time.Minute

// Path returns the root directory of s after checking what running its
// binaries needs: root, unshare, mount, chroot and the root itself. When
// something is missing testenv stops tb (a failure under CI).
func (s Systemd) Path(tb testing.TB) string {
	tb.Helper()
	testenv.Root(tb, fmt.Sprintf("running systemd %d in a chroot (mount namespaces)", s.Version))
	testenv.Tool(tb, "unshare", "util-linux")
	testenv.Tool(tb, "mount", "mount")
	testenv.Tool(tb, "chroot", "coreutils")
	return s.Root.Path(tb)
}

// Output is what a command printed.
type Output struct {
	Stdout, Stderr []byte
	// Console is what the command wrote to /dev/console, where systemd
	// logs in test mode.
	Console []byte
	// Err is the command's error: nil, an *exec.ExitError, or the
	// timeout.
	Err error
}

// ExitCode is the command's exit status, -1 when it did not exit.
func (o Output) ExitCode() int {
	var ee *exec.ExitError
	switch {
	case o.Err == nil:
		return 0
	case errors.As(o.Err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// env is the environment of every command: no colours, no pager, C
// locale, only errors logged.
var env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=", "SYSTEMD_LOG_LEVEL=err"}

// Run runs argv, a program of s's root (looked up in its PATH, or an
// absolute path in the root), chrooted in the root with tree (a host
// directory, or "" for none) bind-mounted read-write at TreeMount, in a
// private mount namespace with /proc mounted and a tmpfs of its own on the
// root's /run and /tmp (systemctl and systemd-analyze write there, e.g.
// /run/systemd/systemd-units-load, which would change the cached root
// that tests treat as read-only). Every Tree in argv is
// replaced by TreeMount. It fails tb only when the command cannot be
// started; the command's own failure is in Output.Err.
func (s Systemd) Run(tb testing.TB, tree string, argv ...string) Output {
	tb.Helper()
	root := s.Path(tb)
	script := `set -e
r=$1 tree=$2 console=$3
shift 3
` + runMounts
	tree = absTree(tb, s, tree)
	return s.namespace(tb, script, []string{root, tree}, substitute(argv, TreeMount))
}

// RunOver is Run as root on the root with upper (a directory made by
// [Systemd.Upper], or "" for none) stacked over it in an overlay whose
// writable layer lives in a tmpfs of the command's own, as
// [Systemd.BootWith] stacks it: a script of the root run this way sees
// the variant's files and writes nowhere that outlives the command.
func (s Systemd) RunOver(tb testing.TB, upper, tree string, argv ...string) Output {
	tb.Helper()
	lower := s.Path(tb)
	tmp := tb.TempDir()
	script := `set -e
r=$1 lower=$2 upper=$3 rw=$4 tree=$5 console=$6
shift 6
` + overlay(upper) + runMounts
	tree = absTree(tb, s, tree)
	return s.namespace(tb, script, []string{filepath.Join(tmp, "merged"), lower, upper, filepath.Join(tmp, "rw"), tree}, substitute(argv, TreeMount))
}

// runMounts is the end of the scripts of Run and RunOver, over the root
// at $r: /proc, a tmpfs of the command's own on /run and /tmp, the
// console, the tree ($tree, "" for none) at TreeMount, then the command
// chrooted.
const runMounts = `mount -t proc proc "$r/proc"
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
mount --bind "$console" "$r/dev/console"
if [ -n "$tree" ]; then mount --bind "$tree" "$r` + TreeMount + `"; fi
exec chroot "$r" "$@"`

// overlay is the part of a script that stacks $upper (when upper is not
// "") over $lower at $r, its writable layer in a tmpfs at $rw, as
// RunOver and BootWith stack a variant over the root.
func overlay(upper string) string {
	lowers := `"$lower"`
	if upper != "" {
		lowers = `"$upper:$lower"`
	}
	return `mkdir -p "$r" "$rw"
mount -t tmpfs tmpfs "$rw"
mkdir "$rw/u" "$rw/w"
mount -t overlay overlay -o lowerdir=` + lowers + `,upperdir="$rw/u",workdir="$rw/w" "$r"
`
}

// absTree is tree made absolute ("" stays "").
func absTree(tb testing.TB, s Systemd, tree string) string {
	tb.Helper()
	if tree == "" {
		return ""
	}
	abs, err := filepath.Abs(tree)
	if err != nil {
		tb.Fatalf("systemd %d: tree %s: %v", s.Version, tree, err)
	}
	return abs
}

// substitute replaces Tree in every argument by where the tree is seen.
func substitute(argv []string, tree string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, Tree, tree)
	}
	return out
}

// namespace runs script in a private mount namespace as
// `sh -c script sh ARGS... CONSOLE ARGV...`: args come first, then the
// path of a file standing in for /dev/console, then argv.
func (s Systemd) namespace(tb testing.TB, script string, args, argv []string) Output {
	tb.Helper()
	console := filepath.Join(tb.TempDir(), "console")
	// systemd drops to nobody in test mode: the console must be writable.
	if err := os.WriteFile(console, nil, 0o666); err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	if err := os.Chmod(console, 0o666); err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	full := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"}, args...)
	full = append(full, console)
	full = append(full, argv...)
	cmd := exec.CommandContext(ctx, "unshare", full...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("systemd %d: %v: timed out after %v: %w", s.Version, argv, Timeout, ctx.Err())
	}
	out, rerr := os.ReadFile(console)
	if rerr != nil {
		tb.Fatalf("systemd %d: read console: %v", s.Version, rerr)
	}
	return Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Console: out, Err: err}
}

// Systemctl runs `systemctl --root=TREE ARGS...` of s against the tree dir.
// For systemd 252 it runs the host's own systemctl when that is 252 (Debian
// 12, as CI is), which needs neither root nor a chroot.
func (s Systemd) Systemctl(tb testing.TB, dir string, args ...string) Output {
	tb.Helper()
	argv := append([]string{"systemctl", "--root=" + Tree, "--no-pager", "--no-legend"}, args...)
	if s.onHost() {
		// systemctl chases links below --root with the root as given: a
		// root reached through a link of its own must be canonical.
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			real, err = filepath.Abs(real)
		}
		if err != nil {
			tb.Fatalf("systemctl: %v", err)
		}
		return hostRun(substitute(argv, real))
	}
	return s.Run(tb, dir, argv...)
}

// ListUnitFiles is `systemctl --root=DIR list-unit-files` of s: its lines,
// without the legend. It fails tb when systemctl fails (systemd 257 exits 1
// when it lists nothing; that is an empty list).
func (s Systemd) ListUnitFiles(tb testing.TB, dir string) []byte {
	tb.Helper()
	o := s.Systemctl(tb, dir, "list-unit-files")
	if o.Err != nil && !(o.ExitCode() == 1 && len(o.Stdout) == 0 && len(bytes.TrimSpace(o.Stderr)) == 0) {
		tb.Fatalf("systemd %d: systemctl list-unit-files on %s: %v: %s", s.Version, dir, o.Err, o.Stderr)
	}
	return o.Stdout
}

var (
	hostOnce    sync.Once
	hostVersion int
)

// onHost reports whether the host's systemctl is s's version.
func (s Systemd) onHost() bool {
	hostOnce.Do(func() {
		o := hostRun([]string{"systemctl", "--version"})
		if o.Err == nil {
			fmt.Sscanf(string(o.Stdout), "systemd %d", &hostVersion)
		}
	})
	return hostVersion == s.Version
}

// hostRun runs argv on the host under Timeout.
func hostRun(argv []string) Output {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Err: err}
}
