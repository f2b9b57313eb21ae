package boot

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// mapRoot is an image of the given files; a value starting with "->" is a
// symbolic link to the rest.
func mapRoot(files map[string]string) *rootfs.FS {
	m := fstest.MapFS{}
	for p, v := range files {
		if t, ok := strings.CutPrefix(v, "->"); ok {
			m[p] = &fstest.MapFile{Data: []byte(t), Mode: fs.ModeSymlink | 0o777}
			continue
		}
		m[p] = &fstest.MapFile{Data: []byte(v), Mode: 0o644}
	}
	m["dev/null"] = &fstest.MapFile{Mode: fs.ModeCharDevice | fs.ModeDevice | 0o666}
	return rootfs.New(m)
}

// TestLoadNFSConf is conf_init_file's reading of nfs.conf by nfs-utils
// version (2.6 with systemd 252, 2.8 with 257), for what the oracle root
// (Debian 12) cannot show: /usr/etc, 2.8's argument-aware override, and
// configurations the C does not survive.
func TestLoadNFSConf(t *testing.T) {
	const g = "[general]\npipefs-directory="
	for _, c := range []struct {
		name    string
		files   map[string]string
		version int
		want    string // "" unset, "!" the generator crashes or hangs
	}{
		{"usr-etc-252", map[string]string{"usr/etc/nfs.conf": g + "/srv/usr\n"}, 252, ""},
		{"usr-etc-257", map[string]string{"usr/etc/nfs.conf": g + "/srv/usr\n"}, 257, "/srv/usr"},
		{"etc-replaces-usr-etc", map[string]string{"usr/etc/nfs.conf": g + "/srv/usr\n", "etc/nfs.conf": "[general]\n"}, 257, ""},
		{"usr-etc-d", map[string]string{"usr/etc/nfs.conf.d/a.conf": g + "/srv/usrd\n"}, 257, "/srv/usrd"},
		{"etc-d-over-usr-etc", map[string]string{"usr/etc/nfs.conf": g + "/srv/usr\n", "etc/nfs.conf.d/b.conf": g + "/srv/etcd\n"}, 257, "/srv/etcd"},
		{"dev-null-wipes", map[string]string{"usr/etc/nfs.conf": g + "/srv/usr\n", "etc/nfs.conf": "->/dev/null"}, 257, ""},
		{"arg-after-252", map[string]string{"etc/nfs.conf": g + "/a\n[general \"x\"]\npipefs-directory=/b\n"}, 252, ""},
		{"arg-after-257", map[string]string{"etc/nfs.conf": g + "/a\n[general \"x\"]\npipefs-directory=/b\n"}, 257, "/a"},
		{"self-include", map[string]string{"etc/nfs.conf": "[general]\ninclude=nfs.conf\n"}, 252, "!"},
		{"env-cycle", map[string]string{"etc/nfs.conf": g + "$A\n[environment]\nA=$A\n"}, 252, ""},
		{"env-missing", map[string]string{"etc/nfs.conf": g + "$A\n"}, 252, ""},
		{"include-inherits", map[string]string{"etc/nfs.conf": "[general]\ninclude=-sub/x.conf\n", "etc/sub/x.conf": "pipefs-directory=/inc\n"}, 252, "/inc"},
		{"include-scoped", map[string]string{"etc/nfs.conf": "[general]\ninclude=/i.conf\npipefs-directory=/after\n", "i.conf": "[other]\n"}, 252, "/after"},
		{"no-bracket", map[string]string{"etc/nfs.conf": "[general\npipefs-directory=/x\n"}, 252, ""},
		{"no-quote", map[string]string{"etc/nfs.conf": "[general \"x]\npipefs-directory=/x\n"}, 252, "/x"},
		{"nul", map[string]string{"etc/nfs.conf": g + "/x\n\x00" + g + "/y\n"}, 252, "/x"},
		{"empty-value", map[string]string{"etc/nfs.conf": g + "/x\npipefs-directory=\n"}, 252, "/x"},
		{"dir-d-order", map[string]string{"etc/nfs.conf.d/10.conf": g + "/ten\n", "etc/nfs.conf.d/9.conf": g + "/nine\n"}, 252, "/ten"},
		{"short-name", map[string]string{"etc/nfs.conf.d/.conf": g + "/x\n"}, 252, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf, ok := loadNFSConf(mapRoot(c.files), c.version)
			if c.want == "!" {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			v, _ := conf.get("general", "pipefs-directory")
			assert.Equal(t, c.want, v)
		})
	}
}

// TestGeneratorOutput runs the generators over a small image and reads
// the result as the loader does: a generated unit under
// /run/systemd/generator overrides the vendor's, a generated .wants link
// names its generator.
func TestGeneratorOutput(t *testing.T) {
	fsys := mapRoot(map[string]string{
		"usr/lib/systemd/system-generators/rpc-pipefs-generator": "ELF",
		"usr/lib/systemd/system-generators/postgresql-generator": "#!/bin/sh\n",
		"etc/nfs.conf": "[general]\npipefs-directory=/run/rpc_pipefs\n",
		"usr/lib/systemd/system/rpc_pipefs.target":     "[Unit]\nRequires=var-lib-nfs-rpc_pipefs.mount\n",
		"etc/postgresql/15/main/postgresql.conf":       "",
		"usr/lib/systemd/system/postgresql.service":    "[Service]\nExecStart=/bin/true\n",
		"usr/lib/systemd/system/postgresql@.service":   "[Service]\nExecStart=/bin/true\n",
		"etc/systemd/system/multi-user.target.wants/x": "",
	})
	m := fsys.Source().(fstest.MapFS)
	m["usr/lib/systemd/system-generators/rpc-pipefs-generator"].Mode = 0o755
	m["usr/lib/systemd/system-generators/postgresql-generator"].Mode = 0o755
	m["usr/lib/postgresql/15/bin/postgres"] = &fstest.MapFile{Data: []byte("x"), Mode: 0o755}
	g, err := Load(fsys, 252)
	require.NoError(t, err)
	u := g.Unit("rpc_pipefs.target")
	assert.Equal(t, "/run/systemd/generator/rpc_pipefs.target", u.Fragment)
	assert.Equal(t, "/usr/lib/systemd/system-generators/rpc-pipefs-generator", g.GeneratedBy(u.Fragment))
	assert.Contains(t, depNames(u), "run-rpc_pipefs.mount")
	pg := g.Unit("postgresql.service")
	var dep Dep
	for _, d := range pg.Deps {
		if d.Name == "postgresql@15-main.service" {
			dep = d
		}
	}
	assert.Equal(t, Dep{Kind: ".wants", Name: "postgresql@15-main.service", Source: "/run/systemd/generator/postgresql.service.wants/postgresql@15-main.service"}, dep)
	assert.Equal(t, "/usr/lib/systemd/system-generators/postgresql-generator", g.GeneratedBy(dep.Source))
	assert.Empty(t, g.GeneratedBy("/usr/lib/systemd/system/postgresql.service"))
}

func writeFile(p string, data []byte) error { return os.WriteFile(p, data, 0o644) }

func depNames(u *Unit) []string {
	var out []string
	for _, d := range u.Deps {
		out = append(out, d.Name)
	}
	return out
}

// FuzzNFSConf reads arbitrary nfs.conf texts (one including the other):
// the reader never panics or loops, and what the generator writes loads.
func FuzzNFSConf(f *testing.F) {
	f.Add([]byte("[general]\npipefs-directory=/run/rpc_pipefs\n"), []byte(""), 252)
	f.Add([]byte("[General \"a\"]\n pipefs-directory = '/x y' \ninclude=inc.conf\n"), []byte("pipefs-directory=$V\n[environment]\nV=/v\\\n\n"), 257)
	f.Add([]byte("[general]\ninclude=-/etc/nfs.conf\n"), []byte("[x\n=\n;c\n#d\n"), 252)
	f.Fuzz(func(t *testing.T, conf, inc []byte, version int) {
		fsys := mapRoot(map[string]string{
			"etc/nfs.conf":          string(conf),
			"etc/inc.conf":          string(inc),
			"etc/nfs.conf.d/a.conf": string(inc),
			"usr/lib/systemd/system-generators/rpc-pipefs-generator": "x",
		})
		fsys.Source().(fstest.MapFS)["usr/lib/systemd/system-generators/rpc-pipefs-generator"].Mode = 0o755
		c, ok := loadNFSConf(fsys, version)
		if ok {
			v, _ := c.get("general", "pipefs-directory")
			if len(v) > len(conf)+len(inc) {
				t.Fatalf("value %q longer than the input", v)
			}
		}
		g, err := Load(fsys, version)
		if err != nil {
			t.Fatal(err)
		}
		g.Boot()
	})
}

// FuzzStartConf compares startConf with the shell and sed of
// postgresql-generator on arbitrary start.conf texts (C locale).
func FuzzStartConf(f *testing.F) {
	sh := testenv.Tool(f, "sh", "dash")
	testenv.Tool(f, "sed", "sed")
	f.Add([]byte("auto\n"))
	f.Add([]byte("# c\n  auto  # x\n\n"))
	f.Add([]byte("auto\nauto"))
	f.Add([]byte("\v\f\r\t\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		p := filepath.Join(dir, "start.conf")
		require.NoError(t, writeFile(p, data))
		cmd := exec.Command(sh, "-c", `start=$(sed 's/#.*$//; /^[[:space:]]*$/d; s/^\s*//; s/\s*$//' "$1") && printf %s "$start"`, "sh", p)
		cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
		out, err := cmd.Output()
		require.NoError(t, err)
		if got := startConf(data); got != string(out) {
			t.Fatalf("start.conf %q: model %q, sh %q", data, got, out)
		}
	})
}
