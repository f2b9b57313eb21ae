package condition

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// oracleCase is one assignment given to systemd-analyze condition: in a
// unit file of the template instance c<N>@bar.service (unitID's length),
// or, cmdline, as an argument (unit test.service), which can carry what
// a unit file cannot (a line that is not UTF-8 is dropped whole).
type oracleCase struct {
	setting, value string
	cmdline        bool
}

// oracleID is the unit a case is read as, all of one length.
func oracleID(i int, c oracleCase) string {
	if c.cmdline {
		return "test.service"
	}
	return fmt.Sprintf("c%03d@bar.service", i)
}

// fill is a value of prefix and "%n" of id expanding to exactly n bytes.
func fill(prefix, id string, n int) string {
	rest := n - len(prefix)
	return prefix + strings.Repeat("x", rest%len(id)) + strings.Repeat("%n", rest/len(id))
}

func oracleCases() []oracleCase {
	const pid = "c000@bar.service" // every unit-file id has its length
	comp := strings.Repeat("a", 255)
	// path is a path of n bytes, components of 200.
	path := func(n int) string {
		s := strings.Repeat("/"+strings.Repeat("b", 199), (n-2)/200)
		return s + "/" + strings.Repeat("b", n-len(s)-1)
	}
	cs := []oracleCase{
		{"ConditionPathExists", "/etc/passwd", false},
		{"ConditionPathExists", "/etc/../etc", false},
		{"ConditionPathExists", "/../etc", false},
		{"ConditionPathExists", "/./../etc", false},
		{"ConditionPathExists", "//..", false},
		{"ConditionPathExists", "/..a", false},
		{"ConditionPathExists", "/etc/./passwd", false},
		{"ConditionPathExists", "/etc//passwd/", false},
		{"ConditionPathExists", "etc/passwd", false},
		{"ConditionPathExists", "/" + comp, false},
		{"ConditionPathExists", "/" + comp + "a", false},
		{"ConditionPathExists", "/" + comp + "/" + comp, false},
		{"ConditionPathExists", "/\xff", true},
		{"ConditionPathExists", "/\xc0\xaf", true},
		{"ConditionPathExists", "/\uFFFE", true},
		{"ConditionPathExists", "/\uFDD0", true},
		{"ConditionPathExists", "/é€", false},
		{"ConditionKernelCommandLine", "\xff", true},
		{"ConditionPathExists", "/a%X", false},
		{"ConditionPathExists", "/a%0", false},
		{"ConditionPathExists", "/a%", false},
		{"ConditionPathExists", "/a%-b%%", false},
		{"ConditionPathExists", "%D/doc", false},
		{"ConditionKernelCommandLine", "a%z", false},
		{"ConditionKernelCommandLine", "a%", false},
		{"ConditionPathExists", "/%n/%N/%p/%P/%i/%I/%j/%J/%f/%u/%U/%g/%G/%h", false},
		{"ConditionPathExists", "%C%E%L%S%t%T%V%d", false},
		{"ConditionPathExists", "/x/%H", false},
		{"ConditionPathExists", "/x/%H%X", false},
		{"ConditionPathExists", "| /etc", false},
		{"ConditionPathExists", "!\t/etc", false},
		{"ConditionPathExists", "|!/etc", false},
		{"ConditionPathExists", "|", false},
		{"ConditionKernelCommandLine", "| ! quiet", false},
		{"ConditionKernelCommandLine", "!", false},
		{"ConditionFirstBoot", "|yes", false},
		{"ConditionNeedsUpdate", "| /etc", false},
		{"ConditionNeedsUpdate", "!/etc/../var", false},
		{"ConditionDirectoryNotEmpty", "/var/./lib//", false},
		{"AssertPathExists", "/etc/../etc", false},
		{"AssertPathIsDirectory", "/../etc", false},
		{"AssertKernelCommandLine", "|quiet%", false},
		{"ConditionPathExists", path(4095), false},
		{"ConditionPathExists", path(4096), false},
		{"ConditionPathExists", path(4094) + "%%", false},
		{"ConditionPathExists", path(4095) + "%%", false},
		{"ConditionPathExists", path(4094) + "%", false},
		{"ConditionPathExists", path(4094) + "%-", false},
		{"ConditionPathExists", fill(path(4000)+"/", pid, 4095), false},
		{"ConditionPathExists", fill(path(4000)+"/", pid, 4096), false},
		{"ConditionPathExists", fill("/", pid, 4096), false},
		{"ConditionPathExists", "/" + strings.Repeat("%n", 100_000), false},
		{"ConditionKernelCommandLine", fill("", pid, 1<<20), false},
		{"ConditionKernelCommandLine", fill("", pid, 1<<20+1), false},
		{"ConditionPathExists", path(4095), true},
		{"ConditionPathExists", path(4096), true},
		{"ConditionPathExists", path(4094) + "%%", true},
		{"ConditionPathExists", "/%n%n" + path(4095-len("/test.servicetest.service")), true},
		{"ConditionPathExists", "/%n%n" + path(4096-len("/test.servicetest.service")), true},
	}
	return cs
}

// TestOracle compares what systemd-analyze condition keeps of each
// assignment, and what it makes of it, with Env.Unit.
func TestOracle(t *testing.T) {
	cases := oracleCases()
	tree := t.TempDir()
	dir := filepath.Join(tree, "etc/systemd/system")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i, c := range cases {
		if !c.cmdline {
			data := fmt.Sprintf("[Unit]\n%s=%s\n[Service]\nExecStart=/bin/true\n", c.setting, c.value)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("c%03d@.service", i)), []byte(data), 0o644))
		}
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			e := env(t, fstest.MapFS{}, false)
			e.Version = sd.Version
			for i, c := range cases {
				id := oracleID(i, c)
				what := fmt.Sprintf("#%d %s=%.80q", i, c.setting, c.value)
				argv := []string{"env", "SYSTEMD_LOG_LEVEL=info", "systemd-analyze", "condition"}
				var opts []*unit.Option
				if c.cmdline {
					argv = append(argv, c.setting+"="+c.value)
					opts = []*unit.Option{{Section: "Unit", Name: c.setting, Value: strings.Trim(c.value, whitespace)}}
				} else {
					argv = append(argv, "--root="+systemdtest.Tree, "--unit="+id)
					data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("c%03d@.service", i)))
					require.NoError(t, err)
					opts, err = unit.ParseConfig(data)
					require.NoError(t, err)
				}
				out := sd.Run(t, tree, argv...)
				kept, value := false, ""
				all := string(out.Stdout) + string(out.Stderr) + string(out.Console)
				for l := range strings.Lines(all) {
					l = strings.TrimRight(l, "\n")
					rest, ok := strings.CutPrefix(l, id+": "+c.setting+"=")
					if !ok {
						continue
					}
					kept = true // a long line is cut short, without its end
					for _, end := range []string{" succeeded.", " failed."} {
						if v, ok := strings.CutSuffix(rest, end); ok {
							kept, value = true, c.setting+"="+v
						}
					}
				}
				if !kept && !strings.Contains(all, "ignoring") && !strings.Contains(all, "Failed to resolve unit specifiers") {
					require.Fail(t, "systemd neither kept nor ignored it", "%s:\n%s", what, all)
				}
				cs := e.Unit(id, [][]*unit.Option{opts})
				if !assert.Equal(t, kept, len(cs) == 1, "%s kept:\n%.300s", what, all) || !kept {
					continue
				}
				if value == "" || machineValue(e, id, c.value) {
					continue // cut short, or the machine's
				}
				assert.Equal(t, value, cs[0].String(), what)
			}
		})
	}
}

// machineValue reports whether v has specifiers of the machine, which
// the model keeps unexpanded in a check's value.
func machineValue(e *Env, id, v string) bool {
	_, machine, err := e.expand(id, v, unit.FullPrintfMax, "")
	return err == nil && len(machine) > 0
}
