package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// writeManyAliases writes a root whose real.service has n links to it in
// /etc/systemd/system, a0.service to a<n-1>.service, every one of them
// loading the same file, and n lines in its [Install] section: with kind
// "alias", Alias= lines naming the links; with "unlisted", Alias= lines
// naming other names (each link is checked against every Alias= name);
// with "also", Alias= and Also= lines in turn; with "dropin", Alias= lines
// naming the links and a drop-in adding one more.
func writeManyAliases(t testing.TB, dir string, n int, kind string) {
	t.Helper()
	etcDir := filepath.Join(dir, etc)
	require.NoError(t, os.MkdirAll(filepath.Join(etcDir, "multi-user.target.wants"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ulib), 0o755))
	require.NoError(t, os.Symlink("usr/lib", filepath.Join(dir, "lib")))
	var b strings.Builder
	b.WriteString("[Unit]\nDescription=real\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
	for i := range n {
		switch kind {
		case "alias", "dropin":
			fmt.Fprintf(&b, "Alias=a%d.service\n", i)
		case "unlisted":
			fmt.Fprintf(&b, "Alias=b%d.service\n", i)
		case "also":
			fmt.Fprintf(&b, "Alias=a%d.service\nAlso=b%d.service\n", i, i)
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, ulib, "real.service"), []byte(b.String()), 0o644))
	if kind == "dropin" {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, ulib, "real.service.d"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ulib, "real.service.d", "x.conf"), []byte("[Install]\nAlias=extra.service\n"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, ulib, "multi-user.target"), []byte("[Unit]\n"), 0o644))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/real.service", filepath.Join(etcDir, "multi-user.target.wants", "real.service")))
	for i := range n {
		require.NoError(t, os.Symlink("/usr/lib/systemd/system/real.service", filepath.Join(etcDir, fmt.Sprintf("a%d.service", i))))
	}
}

// BenchmarkManyAliases lists a root whose one unit has 1,000 and 10,000
// aliases (writeManyAliases): the time per alias must stay flat.
func BenchmarkManyAliases(b *testing.B) {
	for _, kind := range []string{"alias", "unlisted", "also", "dropin"} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				dir := b.TempDir()
				writeManyAliases(b, dir, n, kind)
				src, err := rootfs.OpenDir(dir)
				require.NoError(b, err)
				defer src.Close()
				for b.Loop() {
					us, err := List(rootfs.New(src), 252)
					if err != nil {
						b.Fatal(err)
					}
					if len(us) != n+2 {
						b.Fatalf("%d unit files, want %d", len(us), n+2)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/alias")
			})
		}
	}
}

// manyNamesTree is a tree where hundreds of names load a few files, each
// file's [Install] section meaning something else for each name: a unit
// with 150 Alias= lines and 200 links to it, a template linked from
// outside the search path under 50 names whose DefaultInstance=%p, and so
// Also=%i%i%i.service, grows with the name until it is too long a name,
// and a template with 51 instances whose Also=%N%N.service does the same. One file read for all
// its names must still answer for each name.
func manyNamesTree() map[string]string {
	spec := map[string]string{
		"lib":                            "-> usr/lib",
		ulib + "multi-user.target":       "[Unit]\n",
		ulib + "helper.service":          wantedMulti,
		"opt/reset.conf":                 "[Install]\nWantedBy=\nAlias=\n",
		"opt/more.conf":                  "[Install]\nAlias=more.service %n.more.service\nAlso=%p-also.service\n",
		ulib + "helper.service.d/x.conf": "-> /opt/reset.conf",
		ulib + "real.service.d/x.conf":   "-> /opt/more.conf",
		etc + "a5.service.d/x.conf":      "-> /opt/more.conf",
		"opt/t@.service":                 "[Install]\nDefaultInstance=%p\nAlso=%i%i%i.service\nWantedBy=multi-user.target %i.target\nAlias=%p-al@.service\n",
		ulib + "i@.service":              "[Install]\nWantedBy=multi-user.target\nAlso=%N%N.service\nDefaultInstance=def\n",
	}
	var b strings.Builder
	b.WriteString("[Install]\nWantedBy=multi-user.target %n.target\nAlso=helper.service\nAlias=%n.alias.service\n")
	for i := range 150 {
		fmt.Fprintf(&b, "Alias=a%d.service\n", i)
	}
	spec[ulib+"real.service"] = b.String()
	for i := range 200 {
		spec[fmt.Sprintf("%sa%d.service", etc, i)] = "-> /usr/lib/systemd/system/real.service"
	}
	for l := 60; l < 110; l++ {
		spec["usr/local/lib/systemd/system/u"+strings.Repeat("z", l)+"@.service"] = "-> /opt/t@.service"
	}
	for l := 100; l <= 150; l++ {
		spec[etc+"i@"+strings.Repeat("x", l)+".service"] = "-> /usr/lib/systemd/system/i@.service"
	}
	return spec
}

// TestManyNamesMatchSystemctl compares the many-names tree with systemctl
// list-unit-files, and with is-enabled for instances that have no file of
// their own name, on both versions: reading a file once for all the names
// that load it must not give one name another's answer.
func TestManyNamesMatchSystemctl(t *testing.T) {
	spec := manyNamesTree()
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, spec)
			want := compareTree(t, sd, dir, true)
			require.Greater(t, len(want), 300)
			states := map[string]bool{}
			for _, e := range want {
				states[e.state] = true
			}
			// The names must tell the states apart, or a shared answer
			// would pass.
			for _, st := range []State{Enabled, Indirect, Alias, Bad} {
				assert.True(t, states[string(st)], "no name is %s: %v", st, states)
			}
			var names []string
			for _, l := range []int{100, 121, 122, 150} {
				names = append(names, "i@"+strings.Repeat("y", l)+".service")
			}
			names = append(names, "u"+strings.Repeat("z", 70)+"@v.service", "u"+strings.Repeat("z", 90)+"@.service", "a1.service", "real.service")
			src, err := rootfs.OpenDir(dir)
			require.NoError(t, err)
			defer src.Close()
			x := newIndex(rootfs.New(src), sd.Version)
			for _, n := range names {
				o := sd.Systemctl(t, dir, "is-enabled", n)
				wantState := strings.TrimSpace(string(o.Stdout))
				st, _, err := x.lookupState(n)
				if st == Bad {
					// is-enabled prints nothing for a unit it cannot load.
					assert.Error(t, o.Err, "%s: amilint bad (%v), systemctl %q", n, err, wantState)
					continue
				}
				assert.Equal(t, wantState, string(st), "%s (%v): systemctl says %s", n, err, o.Stderr)
			}
		})
	}
}

// TestSectionAppliesPerName applies one read section to several names: what
// depends on the name (whether Alias= counts, DefaultInstance= and the
// specifiers of Also=) is decided for each, and a drop-in appending to a
// list does not change the section's words another name shares.
func TestSectionAppliesPerName(t *testing.T) {
	sec := readSection([]byte("[Install]\nAlias=b.service\nWantedBy=a.target\nDefaultInstance=%p\nAlso=%n.x.service\n"))
	dropIn := readSection([]byte("[Install]\nWantedBy=c.target\n"))
	load := func(name string, secs ...*section) *installInfo {
		info := &installInfo{name: name}
		p := parser{info: info, spec: &specifiers{}}
		for _, s := range secs {
			require.NoError(t, p.apply(s))
		}
		return info
	}
	svc := load("x.service", sec, dropIn)
	assert.Equal(t, []string{"b.service"}, svc.aliases)
	assert.Equal(t, []string{"a.target", "c.target"}, svc.wantedBy)
	assert.Equal(t, []string{"x.service.x.service"}, svc.also)
	mnt := load("x.mount", sec)
	assert.Nil(t, mnt.aliases, "a mount unit cannot alias")
	assert.Equal(t, []string{"a.target"}, mnt.wantedBy, "the drop-in's append did not reach the shared words")
	tpl := load("t@.service", sec)
	assert.Equal(t, "t", tpl.defaultInstance)
	assert.Equal(t, []string{"t@t.service.x.service"}, tpl.also)
	inst := load("t@i.service", sec)
	assert.Empty(t, inst.defaultInstance, "an instance ignores DefaultInstance=")
	assert.Equal(t, []string{"t@i.service.x.service"}, inst.also)
	p := parser{info: &installInfo{name: "y.service"}, spec: &specifiers{}}
	require.ErrorIs(t, p.apply(readSection([]byte("[Install]\nAlso=ok.service %z.service b.service\n"))), errBadSpecifier)
	assert.Equal(t, []string{"ok.service"}, p.info.also, "the words before the bad one count")
}
