package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/rules"
)

var testCatalog = []rules.Hardening{
	{ID: "a", Title: "A", Units: []string{"a.service", "a-alias.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
	{ID: "b", Title: "B", Units: []string{"b.service"}, DropIn: "[Service]\nProtectHome=yes\n"},
	{ID: "c", Title: "C", Units: []string{"c.service"}, DropIn: "[Service]\nProtectSystem=strict\n"},
	{ID: "d", Title: "D", Units: []string{"d.service"}, DropIn: "[Service]\nNoNewPrivileges=yes\n"},
}

func TestHardeningFor(t *testing.T) {
	files := []install.UnitFile{
		{Name: "a.service", State: install.Enabled},
		{Name: "a-alias.service", State: install.Alias},
		{Name: "b.service", State: install.Disabled},
		{Name: "c.service", State: install.Enabled},
		{Name: "d.service", State: install.EnabledRuntime},
		{Name: "e.service", State: install.Static},
		{Name: "f.service", State: install.Static},
		{Name: "g.service", State: install.Static},
		{Name: "i.service", State: install.Static},
		{Name: "j.service", State: install.Static},
		{Name: "k.service", State: install.Static},
	}
	catalog := append(slices.Clone(testCatalog),
		rules.Hardening{ID: "e", Title: "E", Units: []string{"e.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "f", Title: "F", Units: []string{"f.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "g", Title: "G", Units: []string{"g.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "h", Title: "H", Units: []string{"h.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "i", Title: "I", Units: []string{"i.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "j", Title: "J", Units: []string{"j.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
		rules.Hardening{ID: "k", Title: "K", Units: []string{"k.service"}, DropIn: "[Service]\nPrivateTmp=yes\n"},
	)
	activatedBy := map[string][]string{
		"e.service": {"e.timer"},            // a static service its started timer runs
		"f.service": {"f.timer"},            // … whose timer the same fix disables
		"g.service": {"g.path", "g.socket"}, // … one of whose triggers stays
		"h.service": {"h.timer"},            // no unit file of that name
		"b.service": {"b.socket"},           // disabled, but socket-activated
	}
	// i is static and the boot starts it (an enabled unit wants it); the
	// same fix disables j; k is static and nothing starts it.
	b := &boot.Boot{ActivatedBy: activatedBy, Start: []string{"a.service", "i.service", "j.service", "multi-user.target"}}
	got := HardeningFor(files, b, catalog, []string{"c.service", "f.timer", "g.socket", "j.service"})
	var units []string
	for _, d := range got {
		units = append(units, d.Unit+"@"+d.Entry)
		assert.Equal(t, "/etc/systemd/system/"+d.Unit+".d/"+rules.DropInName, d.Path)
		assert.Contains(t, d.Content, "amilint fix --harden")
	}
	// c is disabled by the same fix, the alias is the same service as a,
	// f's only timer is disabled by the same fix.
	assert.Equal(t, []string{"a.service@a", "b.service@b", "d.service@d", "e.service@e", "g.service@g", "i.service@i"}, units)
}

// TestHardeningForTemplate: a template entry applies when an instance of
// it starts at boot or is activated by a trigger the fix leaves, or the
// template is enabled; its drop-in goes to the template's directory.
func TestHardeningForTemplate(t *testing.T) {
	entry := func(id, u string) rules.Hardening {
		return rules.Hardening{ID: id, Title: id, Units: []string{u}, DropIn: "[Service]\nPrivateTmp=yes\n"}
	}
	catalog := []rules.Hardening{
		entry("a", "a@.service"), // an instance starts at boot
		entry("b", "b@.service"), // enabled, no instance starts
		entry("c", "c@.service"), // its instance is disabled by the same fix
		entry("d", "d@.service"), // an instance its started socket activates
		entry("e", "e@.service"), // … whose only socket the same fix disables
		entry("f", "f@.service"), // no template file
		entry("g", "g@.service"), // disabled, nothing of it runs
		entry("h", "h@.service"), // the same fix masks the template
	}
	var files []install.UnitFile
	for _, n := range []string{"a", "c", "d", "e", "g", "h"} {
		files = append(files, install.UnitFile{Name: n + "@.service", State: install.Disabled})
	}
	files = append(files, install.UnitFile{Name: "b@.service", State: install.Enabled})
	b := &boot.Boot{
		Start:       []string{"a@two.service", "a@-.service", "c@x.service", "f@x.service", "h@x.service", "multi-user.target"},
		ActivatedBy: map[string][]string{"d@1.service": {"d.socket"}, "e@1.service": {"e.socket"}},
	}
	got := HardeningFor(files, b, catalog, []string{"c@x.service", "e.socket", "h@.service"})
	var units []string
	for _, d := range got {
		units = append(units, fmt.Sprintf("%s%v", d.Unit, d.Instances))
		assert.Equal(t, "/etc/systemd/system/"+d.Unit+".d/"+rules.DropInName, d.Path)
	}
	assert.Equal(t, []string{"a@.service[a@-.service a@two.service]", "b@.service[]", "d@.service[d@1.service]"}, units)
	assert.Equal(t, "a@-.service", got[0].Scored(), "a template is scored by its first instance")
	assert.Equal(t, "b@.service", got[1].Scored())
}

// hardenTree is an image with two enabled services (one already sandboxed
// by a drop-in of its own) and default.target.
func hardenTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w := func(p, s string) {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(s), 0o644))
	}
	w("usr/lib/systemd/system/a.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
	w("usr/lib/systemd/system/d.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
	w("usr/lib/systemd/system/multi-user.target", "[Unit]\nDescription=m\n")
	w("etc/systemd/system/d.service.d/10-own.conf", "[Service]\nUser=nobody\n")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants"), 0o755))
	for _, u := range []string{"a.service", "d.service"} {
		require.NoError(t, os.Symlink("/usr/lib/systemd/system/"+u, filepath.Join(dir, "etc/systemd/system/multi-user.target.wants", u)))
	}
	return dir
}

func planHarden(t *testing.T, dir string, dropins []DropIn) (*Plan, *rootfs.FS) {
	t.Helper()
	src, err := OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	p, view, err := NewPlanHarden(rootfs.New(src), nil, dropins)
	require.NoError(t, err)
	return p, view
}

func TestPlanHardenWritesDropInsAtomicallyAndIdempotently(t *testing.T) {
	dir := hardenTree(t)
	src, err := OpenDir(dir)
	require.NoError(t, err)
	files, err := install.List(rootfs.New(src), 252)
	require.NoError(t, err)
	src.Close()
	dropins := HardeningFor(files, nil, testCatalog, nil)
	require.Len(t, dropins, 2)

	before := snapshot(t, dir)
	p, view := planHarden(t, dir, dropins)
	assert.Equal(t, before, snapshot(t, dir), "planning writes nothing")
	assert.Equal(t, []Change{
		{Op: OpMkdir, Path: "/etc/systemd/system/a.service.d"},
		{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/" + rules.DropInName, Content: dropins[0].Content},
		{Op: OpWrite, Path: "/etc/systemd/system/d.service.d/" + rules.DropInName, Content: dropins[1].Content},
	}, p.Changes)
	require.Len(t, p.DropIns, 2)

	// The planned view is the image as it will be: the services score as
	// hardened before anything is written.
	rep, err := security.ScoreImage(view, security.Options{Units: []string{"a.service", "d.service"}})
	require.NoError(t, err)
	for _, u := range rep.Units {
		require.NotNil(t, u.Assessment, u.Error)
		assert.Contains(t, u.DropIns, "/etc/systemd/system/"+u.Unit+".d/"+rules.DropInName, "the planned drop-in is read")
	}
	plainSrc, err := OpenDir(dir)
	require.NoError(t, err)
	defer plainSrc.Close()
	plain, err := security.ScoreImage(rootfs.New(plainSrc), security.Options{Units: []string{"a.service", "d.service"}})
	require.NoError(t, err)
	for i := range rep.Units {
		assert.Less(t, rep.Units[i].Exposure, plain.Units[i].Exposure, rep.Units[i].Unit)
	}

	require.NoError(t, Apply(dir, p))
	b, err := os.ReadFile(filepath.Join(dir, "etc/systemd/system/a.service.d", rules.DropInName))
	require.NoError(t, err)
	assert.Equal(t, dropins[0].Content, string(b))
	b, err = os.ReadFile(filepath.Join(dir, "etc/systemd/system/d.service.d/10-own.conf"))
	require.NoError(t, err)
	assert.Equal(t, "[Service]\nUser=nobody\n", string(b), "the service's own drop-in is left alone")
	for k := range snapshot(t, dir) {
		assert.NotContains(t, k, ".#amilint-fix.", "nothing is left behind")
	}

	// Again: nothing to do.
	again, _ := planHarden(t, dir, dropins)
	assert.Empty(t, again.Changes)
	for _, d := range again.DropIns {
		assert.True(t, d.Unchanged, d.Unit)
	}

	// A drop-in edited by hand is rewritten.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/systemd/system/a.service.d", rules.DropInName), []byte("[Service]\n"), 0o644))
	edited, _ := planHarden(t, dir, dropins)
	assert.Equal(t, []Change{{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/" + rules.DropInName, Content: dropins[0].Content}}, edited.Changes)
}

func TestPlanHardenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		d     DropIn
		want  string
	}{
		{"a directory where the file goes", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/systemd/system/a.service.d", rules.DropInName), 0o755))
		}, DropIn{Unit: "a.service", Path: "/etc/systemd/system/a.service.d/" + rules.DropInName, Content: "x"}, "not a regular file"},
		{"the drop-in directory is a file", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/systemd/system/a.service.d"), nil, 0o644))
		}, DropIn{Unit: "a.service", Path: "/etc/systemd/system/a.service.d/" + rules.DropInName, Content: "x"}, "not a directory"},
		{"outside /etc/systemd/system", nil, DropIn{Unit: "a.service", Path: "/usr/lib/systemd/system/a.service.d/x.conf", Content: "x"}, "fix writes only under /etc"},
		{"not a drop-in directory", nil, DropIn{Unit: "a.service", Path: "/etc/systemd/system/a.service", Content: "x"}, "fix writes only under /etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := hardenTree(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			src, err := OpenDir(dir)
			require.NoError(t, err)
			defer src.Close()
			_, _, err = NewPlanHarden(rootfs.New(src), nil, []DropIn{tc.d})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestApplyHardenRefusesAnAbsoluteLink: a drop-in directory that is an
// absolute link (to the host's /etc, say) is never written through.
func TestApplyHardenRefusesAnAbsoluteLink(t *testing.T) {
	dir := hardenTree(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "etc/systemd/system/a.service.d")))
	p := &Plan{Changes: []Change{{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/" + rules.DropInName, Content: "x"}}}
	err := Apply(dir, p)
	require.Error(t, err)
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing written outside the image")
	assert.False(t, strings.Contains(strings.Join(keys(snapshot(t, dir)), " "), rules.DropInName))
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPlanHardenScoresWithoutOpeningSpecialFiles: fix --harden scores the
// planned tree through Dir. A type-level drop-in linked to a FIFO (or a
// device node) of the image is skipped by the audit's view, and must be
// skipped here too: opening the FIFO for reading would block forever,
// and a device node names a host device.
func TestPlanHardenScoresWithoutOpeningSpecialFiles(t *testing.T) {
	dir := hardenTree(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "etc/fifo"), 0o644))
	require.NoError(t, syscall.Mknod(filepath.Join(dir, "etc/zero"), syscall.S_IFCHR|0o666, 1<<8|5))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/systemd/system/service.d"), 0o755))
	require.NoError(t, os.Symlink("/etc/fifo", filepath.Join(dir, "etc/systemd/system/service.d/10-fifo.conf")))
	require.NoError(t, os.Symlink("/etc/zero", filepath.Join(dir, "etc/systemd/system/service.d/20-zero.conf")))
	src, err := OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()

	_, view := planHarden(t, dir, HardeningFor([]install.UnitFile{{Name: "a.service", State: install.Enabled}}, nil, testCatalog, nil))
	done := make(chan error, 1)
	go func() {
		for _, name := range []string{"etc/zero", "etc/fifo"} {
			if _, err := src.Open(name); !errors.Is(err, fs.ErrInvalid) {
				done <- fmt.Errorf("open %s: %v, want %v", name, err, fs.ErrInvalid)
				return
			}
		}
		rep, err := security.ScoreImage(view, security.Options{Units: []string{"a.service"}})
		if err == nil && rep.Units[0].Assessment == nil {
			err = errors.New(rep.Units[0].Error)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		// The goroutine stays blocked in open(2) until the test binary
		// exits; unblock it so the next tests run.
		if w, err := os.OpenFile(filepath.Join(dir, "etc/fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("scoring the planned tree blocked opening a FIFO of the image")
	}
}
