package fix

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
)

func TestUnits(t *testing.T) {
	f := func(sev finding.Severity, action string, waived bool, units ...string) finding.Finding {
		return finding.Finding{RuleID: "r", Severity: sev, Waived: waived, Remediation: finding.Remediation{Action: action, Units: units}}
	}
	cases := []struct {
		name     string
		findings []finding.Finding
		failOn   finding.Severity
		want     map[string][]string
	}{
		{"none", nil, finding.High, map[string][]string{}},
		{"disable at threshold", []finding.Finding{f(finding.High, "disable", false, "ecs.service", "b.socket")}, finding.High,
			map[string][]string{Disable: {"b.socket", "ecs.service"}}},
		{"below threshold", []finding.Finding{f(finding.Medium, "disable", false, "x.service")}, finding.High, map[string][]string{}},
		{"waived", []finding.Finding{f(finding.Critical, "mask", true, "x.service")}, finding.Info, map[string][]string{}},
		{"configure and none are not applied", []finding.Finding{f(finding.High, "configure", false, "c.service"), f(finding.High, "none", false, "n.service")},
			finding.Low, map[string][]string{}},
		{"mask wins, duplicates merged", []finding.Finding{
			f(finding.High, "disable", false, "a.service", "b.service"),
			f(finding.Critical, "mask", false, "b.service", "c.timer"),
			f(finding.High, "disable", false, "a.service"),
		}, finding.Medium, map[string][]string{Disable: {"a.service"}, Mask: {"b.service", "c.timer"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Units(c.findings, c.failOn)
			assert.Equal(t, c.want, got)
		})
	}
	assert.Equal(t, []Step{{Disable, []string{"a"}}, {Mask, []string{"b"}}}, Steps(map[string][]string{Mask: {"b"}, Disable: {"a"}}))
}

func materialized(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(name, dir))
	return dir
}

func TestApplyIsIdempotentAndAtomic(t *testing.T) {
	dir := materialized(t, "dlami")
	steps := []Step{
		{Disable, []string{"ecs.service", "amazon-ecs-volume-plugin.service", "apt-daily.timer", "sshd.service", "not-in-image.service"}},
		{Mask, []string{"motd-news.timer", "snapd.service", "not-in-image.service"}},
	}
	p := planDir(t, dir, steps)
	require.NotEmpty(t, p.Changes)
	assert.Contains(t, p.Changes, Change{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/ecs.service"})
	assert.Contains(t, p.Changes, Change{Op: OpSymlink, Path: "/etc/systemd/system/motd-news.timer", Target: "/dev/null"})
	assert.Contains(t, p.Notes, Note{Action: Mask, Unit: "not-in-image.service", Kind: "not-found", Text: "no unit file in the image; not masked"})
	assert.Contains(t, p.Notes, Note{Action: Disable, Unit: "not-in-image.service", Kind: "not-found", Text: "no unit file in the image; only links named after it are removed"})
	require.NoError(t, Apply(dir, p))
	assert.Empty(t, planDir(t, dir, steps).Changes, "planning again after Apply changes nothing")
	// Applying the same plan again is harmless too.
	before := snapshot(t, dir)
	require.NoError(t, Apply(dir, p))
	assert.Equal(t, before, snapshot(t, dir))
	// No temporary link is left behind.
	for k := range before {
		assert.NotContains(t, k, ".#amilint-fix.")
	}
}

func TestPlanWritesNothing(t *testing.T) {
	dir := materialized(t, "dlami")
	before := snapshot(t, dir)
	p := planDir(t, dir, []Step{{Disable, []string{"ecs.service", "ssh.service"}}, {Mask, []string{"motd-news.timer"}}})
	require.NotEmpty(t, p.Changes)
	assert.Equal(t, before, snapshot(t, dir))
}

func TestMaskCreatesMissingConfigDir(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, []entry{{"lib/systemd/system/a.service", 'f', "[Service]\nExecStart=/bin/true\n"}})
	p := planDir(t, dir, []Step{{Mask, []string{"a.service"}}})
	assert.Equal(t, []Change{
		{Op: OpMkdir, Path: "/etc"}, {Op: OpMkdir, Path: "/etc/systemd"}, {Op: OpMkdir, Path: "/etc/systemd/system"},
		{Op: OpSymlink, Path: "/etc/systemd/system/a.service", Target: "/dev/null"},
	}, p.Changes)
	require.NoError(t, Apply(dir, p))
	tgt, err := os.Readlink(filepath.Join(dir, "etc/systemd/system/a.service"))
	require.NoError(t, err)
	assert.Equal(t, "/dev/null", tgt)
}

func TestInvalidActionAndNames(t *testing.T) {
	dir := materialized(t, "dlami")
	src, err := OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	_, err = NewPlan(rootfs.New(src), "enable", []string{"ecs.service"})
	require.Error(t, err)
	p, err := NewPlan(rootfs.New(src), Disable, []string{"not a unit", "../../etc/passwd"})
	require.NoError(t, err)
	assert.Empty(t, p.Changes)
	assert.Len(t, p.Notes, 2)
	_, err = NewPlan(nil, Disable, nil)
	require.Error(t, err)
	// A service with a SysV script: the rc.d links are not fix's, and the
	// plan says so.
	p, err = NewPlan(rootfs.New(src), Disable, []string{"apport.service"})
	require.NoError(t, err)
	require.NotEmpty(t, p.Notes)
	assert.Equal(t, "sysv", p.Notes[0].Kind)
	assert.Contains(t, p.Notes[0].Text, "/etc/init.d/apport exists")
}

// TestEscapeWritesNothingOutside: an image whose /etc/systemd/system, or a
// .wants directory in it, is an absolute link to a host directory outside
// the root. Planning reads the image with chroot semantics; Apply must fail
// closed before writing, and nothing outside the root may change.
func TestEscapeWritesNothingOutside(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	build(t, outside, []entry{
		{"multi-user.target.wants/a.service", 'l', "/lib/systemd/system/a.service"},
		{"a.service", 'f', "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"},
	})
	t.Run("config dir is an absolute link", func(t *testing.T) {
		root := filepath.Join(base, "img1")
		unit := "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
		build(t, root, []entry{
			{"lib/systemd/system/a.service", 'f', unit},
			{"etc/systemd/system", 'l', outside},
			// The same path inside the image, so that the chroot view has
			// something to plan on.
			{outside[1:] + "/multi-user.target.wants/a.service", 'l', "/lib/systemd/system/a.service"},
		})
		hostBefore, imgBefore := snapshot(t, outside), snapshot(t, root)
		for _, step := range []Step{{Disable, []string{"a.service"}}, {Mask, []string{"a.service"}}} {
			p := planDir(t, root, []Step{step})
			require.NotEmpty(t, p.Changes, "%s: the chroot view plans a change", step.Action)
			err := Apply(root, p)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrUnsafePath), "%v", err)
			assert.Contains(t, err.Error(), "/etc/systemd/system -> "+outside)
		}
		assert.Equal(t, hostBefore, snapshot(t, outside), "nothing written outside the root")
		assert.Equal(t, imgBefore, snapshot(t, root), "nothing written in the image either")
	})
	t.Run("wants dir is an absolute link", func(t *testing.T) {
		root := filepath.Join(base, "img2")
		build(t, root, []entry{
			{"lib/systemd/system/a.service", 'f', "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"},
			{"etc/systemd/system/multi-user.target.wants", 'l', filepath.Join(outside, "multi-user.target.wants")},
		})
		hostBefore := snapshot(t, outside)
		p := planDir(t, root, []Step{{Disable, []string{"a.service"}}})
		assert.Empty(t, p.Changes, "systemctl does not walk into linked directories")
		require.NoError(t, Apply(root, p))
		assert.Equal(t, hostBefore, snapshot(t, outside))
	})
	t.Run("hand-made plans through links", func(t *testing.T) {
		root := filepath.Join(base, "img3")
		build(t, root, []entry{
			{"etc/systemd/system", 'd', ""},
			{"etc/systemd/system/abs", 'l', outside},
			{"etc/systemd/system/rel", 'l', "../../../../outside"},
		})
		hostBefore := snapshot(t, outside)
		for _, c := range []Change{
			{Op: OpUnlink, Path: "/etc/systemd/system/abs/multi-user.target.wants/a.service"},
			{Op: OpUnlink, Path: "/etc/systemd/system/rel/multi-user.target.wants/a.service"},
			{Op: OpSymlink, Path: "/etc/systemd/system/rel/x.service", Target: "/dev/null"},
			{Op: OpRmdir, Path: "/etc/systemd/system/rel/multi-user.target.wants"},
		} {
			require.Error(t, Apply(root, &Plan{Changes: []Change{c}}), "%s", c)
		}
		assert.Equal(t, hostBefore, snapshot(t, outside))
	})
}

// TestPlanWithAFIFOSearchDirectory: a directory of the unit search path
// that is a FIFO (/run/systemd/system here) is not a directory to list:
// the audit's view refuses it at once (O_DIRECTORY), and planning over
// Dir must too, rather than block opening it.
func TestPlanWithAFIFOSearchDirectory(t *testing.T) {
	dir, _ := crashTree(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "run/systemd"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "run/systemd/system"), 0o644))
	src, err := OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	type result struct {
		p   *Plan
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := NewPlan(rootfs.New(src), Disable, []string{"a.service"})
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.Equal(t, []Change{{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/a.service"}}, r.p.Changes)
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(filepath.Join(dir, "run/systemd/system"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("planning blocked opening a FIFO of the image as a directory")
	}
}
