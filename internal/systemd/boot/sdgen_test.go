package boot

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// sdGeneratorVariants exercise systemd-rc-local-generator and
// systemd-system-update-generator, run by the real systemd with the
// generators of its root (newVariant keeps them unmasked).
func sdGeneratorVariants() map[string][]op {
	const script = "#!/bin/sh\nexit 0\n"
	flag := file("/system-update", "")
	return map[string][]op{
		// RC_LOCAL_PATH: an executable file, one not executable, a link
		// to an executable inside the root, a dangling link, a directory
		// (root's access(X_OK) passes), a link to /dev/null; the unit
		// masked; the generator masked.
		"rc-local-exec":     {exe("/etc/rc.local", script)},
		"rc-local-noexec":   {file("/etc/rc.local", script)},
		"rc-local-link":     {exe("/usr/local/sbin/rc-local", script), link("/etc/rc.local", "/usr/local/sbin/rc-local")},
		"rc-local-rellink":  {exe("/usr/local/sbin/rc-local", script), link("/etc/rc.local", "../usr/local/sbin/rc-local")},
		"rc-local-dangling": {link("/etc/rc.local", "/nowhere/rc.local")},
		"rc-local-dir":      {file("/etc/rc.local/x", script)},
		"rc-local-devnull":  {link("/etc/rc.local", "/dev/null")},
		"rc-local-d":        {exe("/etc/rc.d/rc.local", script)}, // not Debian's path
		"rc-local-unit-masked": {
			exe("/etc/rc.local", script),
			link("/etc/systemd/system/rc-local.service", "/dev/null"),
		},
		"rc-local-gen-masked": {
			exe("/etc/rc.local", script),
			link("/etc/systemd/system-generators/systemd-rc-local-generator", "/dev/null"),
		},
		// The offline-update flag: a file, a link to a file, a dangling
		// link, /etc/system-update (254 and later), both; with
		// system-update.target masked or missing (default.target then
		// fails to load: rescue.target), with a default.target of /etc
		// (the early directory ranks above it), with rc.local (wanted by
		// multi-user.target, which no longer starts).
		"system-update-file":     {flag},
		"system-update-link":     {file("/var/lib/system-update", ""), link("/system-update", "/var/lib/system-update")},
		"system-update-dangling": {link("/system-update", "/var/lib/x")},
		"system-update-etc":      {file("/etc/system-update", "")},
		"system-update-both":     {flag, link("/etc/system-update", "/nowhere")},
		"system-update-masked":   {flag, link("/etc/systemd/system/system-update.target", "/dev/null")},
		"system-update-missing":  {flag, systemdtest.Remove("/usr/lib/systemd/system/system-update.target")},
		"system-update-etc-default": {
			flag,
			link("/etc/systemd/system/default.target", "/lib/systemd/system/graphical.target"),
		},
		"system-update-rc-local": {flag, exe("/etc/rc.local", script)},
		"system-update-gen-masked": {
			flag,
			link("/etc/systemd/system-generators/systemd-system-update-generator", "/dev/null"),
		},
	}
}

// TestOracleSystemdGenerators compares, for each variant and systemd
// version, the start jobs, the unit default.target names, the fallback
// and the failure of systemd's transaction with the model's.
func TestOracleSystemdGenerators(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, ops := range sdGeneratorVariants() {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				v := newVariant(t, sd, ops)
				want := v.oracle(t)
				b := v.graph(t).Boot()
				onlySystemd, onlyModel := diff(want.Start, b.Start)
				t.Logf("%s: systemd %d starts %d units, the model %d; only systemd: %v; only model: %v; default %s/%s",
					name, sd.Version, len(want.Start), len(b.Start), onlySystemd, onlyModel, want.Default, b.Default)
				assert.Equal(t, want.Start, b.Start)
				assert.Equal(t, want.Failed != "", b.Err != nil, "failure: %s", want.Failed)
				assert.Equal(t, want.Fallback != "", b.Fallback != "", "fallback: %s", b.Fallback)
				if want.Failed == "" {
					assert.Equal(t, want.Default, b.Default)
				}
			})
		}
	}
}

// TestSystemUpdateChain: the offline-update boot's chains start at the
// early directory's default.target link, which systemd-system-update-
// generator writes.
func TestSystemUpdateChain(t *testing.T) {
	sd := systemdtest.Bookworm
	v := newVariant(t, sd, []op{file("/system-update", "")})
	g := v.graph(t)
	b := g.Boot()
	require.NoError(t, b.Err)
	assert.Equal(t, "system-update.target", b.Default)
	assert.Equal(t, "system-update.target", b.Root)
	const src = "/run/systemd/generator.early/default.target"
	chain := b.Chain("system-update-cleanup.service")
	require.NotEmpty(t, chain)
	assert.Equal(t, unit.Edge{From: "default.target", To: "system-update.target", Kind: "alias", Source: src}, chain[0])
	assert.Equal(t, "/lib/systemd/system-generators/systemd-system-update-generator", g.GeneratedBy(src))
	assert.False(t, b.StartsAtBoot("multi-user.target"))
}

// TestRCLocalPathIn reads RC_LOCAL_PATH from the generators of both
// Debian roots and from made-up executables.
func TestRCLocalPathIn(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		data, err := os.ReadFile(filepath.Join(sd.Path(t), "usr/lib/systemd/system-generators/systemd-rc-local-generator"))
		require.NoError(t, err)
		assert.Equal(t, "/etc/rc.local", rcLocalPathIn(data), "systemd %d", sd.Version)
	}
	for in, want := range map[string]string{
		"\x7fELF\x00/etc/rc.d/rc.local\x00%s is not marked executable\x00": "/etc/rc.d/rc.local",
		"/etc/rc.local\x00":                                   "/etc/rc.local",
		"\x00/etc/rc.local\x00x\x00/etc/rc.local\x00":         "/etc/rc.local",
		"\x00/etc/rc.local\x00/etc/rc.d/rc.local\x00":         "", // which one?
		"\x00/etc/rc.local":                                   "", // no NUL ends it
		"\x00etc/rc.local\x00":                                "", // relative
		"\x00/etc/my rc.local\x00":                            "",
		"\x00/etc/myrc.local\x00":                             "",
		"\x00/rc.local\x00":                                   "/rc.local",
		"\x00/lib/systemd/system/rc-local.service\x00":        "",
		"\x00\xff/etc/rc.local\x00":                           "",
		"\x00/" + strings.Repeat("a", 5000) + "/rc.local\x00": "",
		"": "",
	} {
		assert.Equal(t, want, rcLocalPathIn([]byte(in)), "%q", in)
	}
}

// FuzzRCLocalPathIn: any file gives "" or one clean candidate it holds.
func FuzzRCLocalPathIn(f *testing.F) {
	f.Add([]byte("\x00/etc/rc.local\x00"))
	f.Add([]byte("\x00/etc/rc.d/rc.local\x00/etc/rc.local\x00"))
	f.Add([]byte("/rc.local\x00/rc.local\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := rcLocalPathIn(data)
		if p == "" {
			return
		}
		if !strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/rc.local") || len(p) > maxPath ||
			!strings.Contains(string(data), p+"\x00") {
			t.Fatalf("%q from %q", p, data)
		}
	})
}

// TestSDGeneratorsModel checks the generators' rules on small trees: what
// access(X_OK) as root passes, which flags 252 and 257 read.
func TestSDGeneratorsModel(t *testing.T) {
	gen := &fstest.MapFile{Data: []byte("\x00/etc/rc.local\x00"), Mode: 0o755}
	base := func() fstest.MapFS {
		return fstest.MapFS{
			"usr/lib/systemd/system-generators/systemd-rc-local-generator":      gen,
			"usr/lib/systemd/system-generators/systemd-system-update-generator": gen,
		}
	}
	run := func(m fstest.MapFS, version int) *genOut {
		return runGenerators(rootfs.New(m), version, "", Machine{})
	}
	wants := genDirNormal + "/multi-user.target.wants/rc-local.service"
	early := genDirEarly + "/default.target"
	for _, c := range []struct {
		name    string
		add     fstest.MapFS
		version int
		want    string
	}{
		{"exec", fstest.MapFS{"etc/rc.local": {Mode: 0o700}}, 252, wants},
		{"group-exec", fstest.MapFS{"etc/rc.local": {Mode: 0o610}}, 252, wants},
		{"noexec", fstest.MapFS{"etc/rc.local": {Mode: 0o644}}, 252, ""},
		{"dir", fstest.MapFS{"etc/rc.local": {Mode: fs.ModeDir | 0o600}}, 252, wants},
		{"flag", fstest.MapFS{"system-update": {}}, 252, early},
		{"etc-flag-252", fstest.MapFS{"etc/system-update": {}}, 252, ""},
		{"etc-flag-257", fstest.MapFS{"etc/system-update": {}}, 257, early},
	} {
		m := base()
		for k, v := range c.add {
			m[k] = v
		}
		out := run(m, c.version)
		var got []string
		for _, n := range []string{wants, early} {
			if _, err := out.lstat(n); err == nil {
				got = append(got, n)
			}
		}
		if c.want == "" {
			assert.Empty(t, got, c.name)
		} else {
			assert.Equal(t, []string{c.want}, got, c.name)
		}
	}
	target, err := run(fstest.MapFS{"system-update": {}, "usr/lib/systemd/system-generators/systemd-system-update-generator": gen}, 257).readLink(early)
	require.NoError(t, err)
	assert.Equal(t, "/usr/lib/systemd/system/system-update.target", target)
}
