package fix

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// The differential tests run the real systemctl of systemd 252 on one copy
// of a tree and NewPlan+Apply on another, and require identical trees and
// identical lists of removed and created links.

const systemctlPath = "/usr/bin/systemctl"

func needSystemctl(t *testing.T) {
	t.Helper()
	out, err := exec.Command(systemctlPath, "--version").Output()
	if err != nil {
		testenv.Missing(t, "no %s on this machine (Debian package systemd): %v", systemctlPath, err)
	}
	require.Contains(t, string(out), "systemd 252", "the reference must be systemd 252")
}

// entry is one file, link or directory of a generated tree.
type entry struct {
	path string // image path without leading slash
	kind byte   // 'f' file, 'l' link, 'd' directory
	data string // file content or link target
}

// build writes entries under dir in order, parents as needed.
func build(t *testing.T, dir string, es []entry) {
	t.Helper()
	made := map[string]bool{}
	for _, e := range es {
		p := filepath.Join(dir, e.path)
		if parent := filepath.Dir(p); !made[parent] {
			require.NoError(t, os.MkdirAll(parent, 0o755))
			made[parent] = true
		}
		switch e.kind {
		case 'f':
			require.NoError(t, os.WriteFile(p, []byte(e.data), 0o644))
		case 'l':
			require.NoError(t, os.Symlink(e.data, p))
		case 'd':
			require.NoError(t, os.MkdirAll(p, 0o755))
		}
	}
}

// snapshot describes every entry below dir: type, mode, link target or content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "link -> " + tgt
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = fmt.Sprintf("file %v %q", fi.Mode().Perm(), b)
		}
		return nil
	})
	require.NoError(t, err)
	return m
}

var (
	removedRe = regexp.MustCompile(`^Removed "(.*)"\.$`)
	createdRe = regexp.MustCompile(`^Created symlink (.*) → (.*)\.$`)
)

// systemctl runs the reference and returns its change lines as plan
// changes (image paths), in the order it printed them.
func systemctl(t *testing.T, root, action string, units []string) []Change {
	t.Helper()
	args := append([]string{"--root=" + root, "--no-reload", action}, units...)
	cmd := exec.Command(systemctlPath, args...)
	// SysV compatibility (systemd-sysv-install, update-rc.d for
	// /etc/init.d scripts) is outside install.c and outside fix.
	cmd.Env = append(os.Environ(), "SYSTEMCTL_SKIP_SYSV=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // refusals exit 1; the tree is what is compared
	var cs []Change
	for _, l := range strings.Split(out.String(), "\n") {
		if m := removedRe.FindStringSubmatch(l); m != nil {
			cs = append(cs, Change{Op: OpUnlink, Path: strings.TrimPrefix(m[1], root)})
		}
		if m := createdRe.FindStringSubmatch(l); m != nil {
			cs = append(cs, Change{Op: OpSymlink, Path: strings.TrimPrefix(m[1], root), Target: m[2]})
		}
	}
	return cs
}

// linkChanges keeps the changes systemctl reports (it does not report the
// directories it removes or creates).
func linkChanges(p *Plan) []Change {
	var out []Change
	for _, c := range p.Changes {
		if c.Op == OpUnlink || c.Op == OpSymlink {
			out = append(out, c)
		}
	}
	return out
}

// planDir plans over dir in readdir order, as the CLI does.
func planDir(t *testing.T, dir string, steps []Step) *Plan {
	t.Helper()
	src, err := OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	p, err := NewPlanSteps(rootfs.New(src), steps)
	require.NoError(t, err)
	return p
}

// compare runs one step both ways on copies a (systemctl) and b (amilint)
// and requires the same trees and the same reported changes. It returns the
// plan.
func compare(t *testing.T, a, b string, step Step) *Plan {
	t.Helper()
	p := planDir(t, b, []Step{step})
	units := step.Units
	if step.Action == Mask {
		// fix skips units the image lacks (with a note); systemctl masks
		// them. Give systemctl the units fix kept.
		units = nil
		for _, s := range p.Steps {
			units = append(units, s.Units...)
		}
		if len(units) == 0 {
			require.Empty(t, p.Changes)
			return p
		}
	}
	before := snapshot(t, b)
	want := systemctl(t, a, step.Action, units)
	require.Equal(t, before, snapshot(t, b), "planning must not write")
	require.NoError(t, Apply(b, p))
	assert.Equal(t, want, linkChanges(p), "%s %v: changes differ from systemctl's", step.Action, units)
	assert.Equal(t, snapshot(t, a), snapshot(t, b), "%s %v: trees differ", step.Action, units)
	return p
}

// copies materializes the same tree twice.
func copies(t *testing.T, make func(dir string)) (string, string) {
	t.Helper()
	base := t.TempDir()
	a, b := filepath.Join(base, "systemctl"), filepath.Join(base, "amilint")
	make(a)
	make(b)
	return a, b
}

func TestDifferentialFixtures(t *testing.T) {
	needSystemctl(t)
	cases := []struct {
		fixture string
		step    Step
	}{
		{"dlami", Step{Disable, []string{"ecs.service", "amazon-ecs-volume-plugin.service", "amazon-ecs-volume-plugin.socket"}}},
		{"dlami", Step{Disable, []string{"ssh.service", "rsyslog.service", "ModemManager.service", "multipathd.service"}}},
		{"dlami", Step{Disable, []string{"sshd.service", "syslog.service", "multipath-tools.service", "getty@tty1.service"}}},
		{"dlami", Step{Disable, []string{"getty@.service", "snapd.service", "not-in-image.service", "x11-common.service"}}},
		{"dlami", Step{Mask, []string{"motd-news.timer", "snapd.service", "snapd.socket", "ModemManager.service", "not-in-image.service"}}},
		{"dlami", Step{Mask, []string{"x11-common.service", "sshd.service", "ecs.service"}}},
		{"hardened", Step{Disable, []string{"snapd.service", "containerd.service", "docker.service", "cron.service"}}},
		{"hardened", Step{Mask, []string{"motd-news.timer", "cron.service"}}},
		{"adv-links", Step{Disable, []string{"good.service", "shadow.service", "dotdot.service", "procroot.service", "dangling.service"}}},
		{"adv-links", Step{Disable, []string{"abs-good.service", "up.service"}}},
		{"adv-links", Step{Mask, []string{"good.service", "dangling.service", "abs-good.service"}}},
		{"adv-loops", Step{Disable, []string{"self.service", "ping.service", "pong.service", "chain40.service", "chain41.service", "good.service"}}},
		{"adv-masks", Step{Disable, []string{"masked.service", "tmpl@.service", "tmpl@x.service", "good.service"}}},
		{"adv-masks", Step{Mask, []string{"masked.service", "tmpl@.service", "good.service"}}},
		{"adv-corrupt", Step{Disable, []string{"empty.service", "garbage.service", "broken.service", "huge.service", "crlf.service", "good.service"}}},
	}
	for _, c := range cases {
		t.Run(c.fixture+"/"+c.step.Action+"/"+strings.Join(c.step.Units, ","), func(t *testing.T) {
			a, b := copies(t, func(dir string) { require.NoError(t, fixtures.Materialize(c.fixture, dir)) })
			compare(t, a, b, c.step)
			// A second run of the same command: systemctl again, and the plan
			// of the changed tree.
			compare(t, a, b, c.step)
		})
	}
}

func TestDifferentialDlamiEcs(t *testing.T) {
	needSystemctl(t)
	a, b := copies(t, func(dir string) { require.NoError(t, fixtures.Materialize("dlami", dir)) })
	p := compare(t, a, b, Step{Disable, []string{"ecs.service"}})
	assert.Equal(t, []Change{{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/ecs.service"}}, p.Changes)
	out, _ := exec.Command(systemctlPath, "--root="+b, "is-enabled", "ecs.service").CombinedOutput()
	assert.Equal(t, "disabled", strings.TrimSpace(string(out)))
}

// gen builds a random tree of units, enablement links, aliases, templates
// and instances, Also= lines, dangling and linked links, masks, shadowing
// copies in /etc, links to links and odd directory entries.
type gen struct {
	r  *rand.Rand
	es []entry
}

var (
	genUnits   = []string{"a.service", "b.service", "c.service", "d.socket", "e.timer", "f.service", "g.path", "tpl@.service", "sock@.socket"}
	genTargets = []string{"multi-user.target", "sockets.target", "timers.target", "graphical.target", "foo.target"}
	genAliases = []string{"dbus-org.a.service", "alias-b.service", "alias-d.socket", "other@.service", "x.service"}
	genInst    = []string{"tpl@one.service", "tpl@two.service", "sock@s1.socket", "other@one.service"}
)

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) add(kind byte, p, data string) {
	if slices.ContainsFunc(g.es, func(e entry) bool { return e.path == p }) {
		return
	}
	// Never put a file or link where a directory already holds entries.
	for _, e := range g.es {
		if strings.HasPrefix(e.path, p+"/") || strings.HasPrefix(p, e.path+"/") {
			return
		}
	}
	g.es = append(g.es, entry{p, kind, data})
}

func (g *gen) unitFile(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Unit]\nDescription=%s\n\n[Service]\nExecStart=/bin/true\n\n[Install]\n", name)
	typ := name[strings.LastIndexByte(name, '.'):]
	if g.r.IntN(4) > 0 {
		fmt.Fprintf(&b, "WantedBy=%s\n", g.pick(genTargets))
	}
	if g.r.IntN(3) == 0 {
		fmt.Fprintf(&b, "RequiredBy=%s\n", g.pick(genTargets))
	}
	if g.r.IntN(3) == 0 {
		al := g.pick(genAliases)
		if strings.HasSuffix(al, typ) {
			fmt.Fprintf(&b, "Alias=%s\n", al)
		}
	}
	if g.r.IntN(3) == 0 {
		fmt.Fprintf(&b, "Also=%s\n", g.pick(append(slices.Clone(genUnits), "missing.service", "tpl@one.service")))
	}
	if strings.Contains(name, "@.") && g.r.IntN(2) == 0 {
		b.WriteString("DefaultInstance=one\n")
	}
	return b.String()
}

const (
	etc = "etc/systemd/system"
	lib = "lib/systemd/system"
)

func (g *gen) linkTarget(name string) string {
	switch g.r.IntN(6) {
	case 0:
		return "../../../../" + lib + "/" + name
	case 1:
		return "/usr/" + lib + "/" + name
	case 2:
		return "/" + etc + "/" + g.pick(genAliases) // a link to a link (or to nothing)
	case 3:
		return "/" + lib + "/missing.service"
	}
	return "/" + lib + "/" + name
}

func (g *gen) tree() []entry {
	g.es = nil
	for _, u := range genUnits {
		if g.r.IntN(5) == 0 {
			continue // not in the image
		}
		dir := lib
		if g.r.IntN(6) == 0 {
			dir = "usr/" + lib
		}
		g.add('f', dir+"/"+u, g.unitFile(u))
		if g.r.IntN(6) == 0 {
			g.add('f', etc+"/"+u, g.unitFile(u)) // shadows the vendor file
		}
	}
	n := 4 + g.r.IntN(14)
	for range n {
		switch g.r.IntN(12) {
		case 0, 1, 2, 3: // enablement link in a .wants/.requires dir
			name := g.pick(append(slices.Clone(genUnits), genInst...))
			suffix := ".wants"
			if g.r.IntN(4) == 0 {
				suffix = ".requires"
			}
			tgt := name
			if i := strings.IndexByte(name, '@'); i >= 0 {
				tgt = name[:i+1] + name[strings.LastIndexByte(name, '.'):]
			}
			g.add('l', etc+"/"+g.pick(genTargets)+suffix+"/"+name, g.linkTarget(tgt))
		case 4: // alias link
			al := g.pick(genAliases)
			g.add('l', etc+"/"+al, "/"+lib+"/"+g.pick(genUnits))
		case 5: // a link named as an alias inside a .wants dir
			g.add('l', etc+"/"+g.pick(genTargets)+".wants/"+g.pick(genAliases), g.linkTarget(g.pick(genUnits)))
		case 6: // linked unit file outside the search path
			g.add('f', "opt/units/lnk.service", g.unitFile("lnk.service"))
			g.add('l', etc+"/lnk.service", "/opt/units/lnk.service")
			if g.r.IntN(2) == 0 {
				g.add('l', etc+"/multi-user.target.wants/lnk.service", "/opt/units/lnk.service")
			}
		case 7: // mask
			g.add('l', etc+"/"+g.pick(genUnits), "/dev/null")
		case 8: // mask inside .wants
			g.add('l', etc+"/"+g.pick(genTargets)+".wants/"+g.pick(genUnits), "/dev/null")
		case 9: // odd entries: drop-in dir, hidden link, non-unit link, nested dir
			g.add('f', etc+"/"+g.pick(genUnits)+".d/override.conf", "[Unit]\nDescription=override\n")
			g.add('l', etc+"/multi-user.target.wants/.hidden.service", "/"+lib+"/a.service")
			g.add('l', etc+"/multi-user.target.wants/README", "/"+lib+"/a.service")
			g.add('l', etc+"/nested/deeper/"+g.pick(genTargets)+".wants/"+g.pick(genUnits), "/"+lib+"/"+g.pick(genUnits))
		case 10: // relative link to a sibling in /etc
			g.add('l', etc+"/"+g.pick(genTargets)+".wants/"+g.pick(genUnits), "../"+g.pick(genAliases))
		case 11: // dangling link named as a unit nobody ships
			g.add('l', etc+"/"+g.pick(genTargets)+".wants/missing.service", "/"+lib+"/missing.service")
		}
	}
	return g.es
}

func TestDifferentialRandom(t *testing.T) {
	needSystemctl(t)
	seeds := 100
	if testing.Short() {
		seeds = 20
	}
	all := append(append(append(slices.Clone(genUnits), genAliases...), genInst...), "missing.service", "lnk.service")
	// Count what the trees exercised, so the test cannot pass vacuously.
	stats := map[string]int{}
	for seed := range seeds {
		g := &gen{r: rand.New(rand.NewPCG(uint64(seed), 252))}
		es := g.tree()
		var units []string
		for range 1 + g.r.IntN(3) {
			units = append(units, g.pick(all))
		}
		action := Disable
		if g.r.IntN(4) == 0 {
			action = Mask
		}
		t.Run(fmt.Sprintf("seed%d/%s/%s", seed, action, strings.Join(units, ",")), func(t *testing.T) {
			a, b := copies(t, func(dir string) { build(t, dir, es) })
			p := compare(t, a, b, Step{action, units})
			for _, c := range p.Changes {
				stats[c.Op]++
			}
			for _, n := range p.Notes {
				stats[n.Kind]++
			}
			if p2 := compare(t, a, b, Step{action, units}); !p2.Empty() {
				stats["second-run-changes"]++
			}
		})
	}
	t.Logf("exercised: %v", stats)
	for _, k := range []string{OpUnlink, OpSymlink, OpRmdir, "refused", "not-found", "masked"} {
		assert.Positive(t, stats[k], "no tree exercised %q", k)
	}
}

// TestDifferentialFindings runs what `amilint fix` runs on the fixtures:
// the remediations of every finding, disable then mask, against systemctl
// disable then systemctl mask.
func TestDifferentialFindings(t *testing.T) {
	needSystemctl(t)
	aud, err := audit.New(audit.Config{})
	require.NoError(t, err)
	for _, name := range []string{"dlami", "dlami-ecs-configured", "hardened", "hardened-firstboot"} {
		t.Run(name, func(t *testing.T) {
			a, b := copies(t, func(dir string) { require.NoError(t, fixtures.Materialize(name, dir)) })
			src, err := OpenDir(b)
			require.NoError(t, err)
			res, err := aud.Audit(context.Background(), rootfs.New(src), finding.Target{Name: b, Kind: "dir"})
			src.Close()
			require.NoError(t, err)
			steps := Steps(Units(res.Report.Findings, finding.Info))
			p := planDir(t, b, steps)
			var want []Change
			for _, s := range p.Steps {
				want = append(want, systemctl(t, a, s.Action, s.Units)...)
			}
			require.NoError(t, Apply(b, p))
			assert.Equal(t, want, linkChanges(p))
			assert.Equal(t, snapshot(t, a), snapshot(t, b))
			if name == "dlami" {
				assert.Contains(t, p.Changes, Change{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/ecs.service"})
			}
			if name == "dlami-ecs-configured" {
				assert.NotContains(t, p.Changes, Change{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/ecs.service"})
			}
			assert.Empty(t, planDir(t, b, steps).Changes, "idempotent")
		})
	}
}
