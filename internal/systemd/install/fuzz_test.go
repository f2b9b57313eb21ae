package install

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// FuzzInstallSection feeds arbitrary unit file bytes to the [Install]
// parser as install.c runs it: it must return or fail, never panic, and
// what it keeps must be what systemd could keep.
func FuzzInstallSection(f *testing.F) {
	for _, spec := range featureTrees {
		for p, c := range spec {
			if !strings.HasPrefix(c, "-> ") && !strings.HasSuffix(p, "/") {
				f.Add([]byte(c), p[strings.LastIndexByte(p, '/')+1:])
			}
		}
	}
	f.Add([]byte("[Install]\nAlso=%i%j%n%N%p%%%z\nDefaultInstance=%i\n"), "a@.service")
	f.Add([]byte("[Install]\nWantedBy=\"a b\" 'c d' e\\\\\n"), "x.service")
	f.Add([]byte("\xef\xbb\xbf[Install]\r\nAlias=\\\r\n  y.service\r"), "x.service")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if !nameIsValid(name, nameAny) {
			name = "fuzz.service"
		}
		info := &installInfo{name: name}
		p := parser{info: info, spec: &specifiers{}}
		err := p.parse(data)
		if err != nil {
			return
		}
		for _, a := range info.also {
			assert.True(t, nameIsValid(a, nameAny), "Also= kept invalid name %q", a)
		}
		if info.defaultInstance != "" {
			assert.True(t, instanceIsValid(info.defaultInstance))
		}
		if len(info.aliases) > 0 {
			assert.True(t, typeMayAlias(nameType(name)))
		}
	})
}

// fuzzPaths and fuzzTargets are the vocabulary FuzzList builds trees from.
var (
	fuzzPaths = []string{
		"etc/systemd/system/a.service", "etc/systemd/system/b.service", "lib/systemd/system/a.service",
		"lib/systemd/system/b.service", "lib/systemd/system/c@.service", "etc/systemd/system/c@x.service",
		"etc/systemd/system/multi-user.target.wants/a.service", "lib/systemd/system/multi-user.target.wants/c@y.service",
		"etc/systemd/system/multi-user.target.wants", "lib/systemd/system/a.service.d/x.conf",
		"lib/systemd/system/a.service.d", "run/systemd/system/a.service", "usr/lib/systemd/system/b.service",
		"lib", "etc/systemd/system", "lib/systemd/system/service.d/y.conf", "opt/a.service", "dev/null",
		"lib/systemd/system-preset/90.preset", "etc/machine-id", "run/systemd/generator/g.service",
		"lib/systemd/system/x.socket", "etc/systemd/system/.h.service",
	}
	fuzzTargets = []string{
		"/dev/null", "a.service", "../a.service", "/lib/systemd/system/a.service", "/opt/a.service",
		"usr/lib", "../../../../..", "/etc/systemd/system", "b.service", "c@.service", "/lib/systemd/system/c@.service",
		"x.socket", "/etc/shadow", "/proc/self/root/etc", "lib/systemd/system", ".", "/", "../../lib/systemd/system/a.service.d",
	}
	fuzzContents = []string{
		"", "[Install]\nWantedBy=multi-user.target\n", "[Install]\nAlias=b.service\n", "[Install]\nAlso=b.service\n",
		"[Install\n", "[Install]\nDefaultInstance=x\n", "enable *\ndisable a*\n", "uninitialized\n", "\xff",
	}
)

// fuzzTree turns bytes into an image tree: each 3-byte group adds a file,
// a link or a directory at a vocabulary path.
func fuzzTree(data []byte) fstest.MapFS {
	m := fstest.MapFS{}
	for i := 0; i+2 < len(data); i += 3 {
		p := fuzzPaths[int(data[i+1])%len(fuzzPaths)]
		switch data[i] % 3 {
		case 0:
			m[p] = &fstest.MapFile{Data: []byte(fuzzContents[int(data[i+2])%len(fuzzContents)]), Mode: 0o644}
		case 1:
			m[p] = &fstest.MapFile{Data: []byte(fuzzTargets[int(data[i+2])%len(fuzzTargets)]), Mode: fs.ModeSymlink | 0o777}
		default:
			m[p] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
		}
	}
	// An entry below a file or link would make the tree inconsistent.
	for p := range m {
		for q, f := range m {
			if strings.HasPrefix(p, q+"/") && !f.Mode.IsDir() {
				delete(m, p)
				break
			}
		}
	}
	return m
}

// FuzzList builds trees from fuzz bytes and runs the whole model over them:
// no panic, no hang, and every listed unit has a valid name and a state.
func FuzzList(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 6, 3, 0, 2, 1, 1, 13, 5, 1, 14, 7})
	f.Add([]byte{1, 0, 1, 1, 1, 8, 1, 13, 5, 0, 3, 4, 2, 10, 0, 0, 9, 2})
	f.Add([]byte{1, 2, 0, 1, 11, 0, 1, 5, 10, 0, 4, 3, 0, 18, 6, 0, 19, 7})
	f.Add([]byte{1, 13, 5, 1, 8, 16, 1, 0, 12, 1, 1, 17, 0, 9, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		fsys := rootfs.New(fuzzTree(data))
		done := make(chan struct{})
		var units []UnitFile
		var err error
		go func() {
			defer close(done)
			units, err = List(fsys, 0)
			_, _ = LoadPresets(fsys, 0)
			_ = FirstBoot(fsys)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("List did not return within 10s")
		}
		require.NoError(t, err)
		for _, u := range units {
			assert.True(t, nameIsValid(u.Name, nameAny), u.Name)
			assert.NotEmpty(t, u.State)
			assert.Equal(t, u.State == Bad, u.Err != nil, "%s: %s %v", u.Name, u.State, u.Err)
		}
	})
}
