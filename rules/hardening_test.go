package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHardeningCatalogLoads: every shipped entry loads and validates.
func TestHardeningCatalogLoads(t *testing.T) {
	hs, err := LoadHardening()
	require.NoError(t, err)
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
		assert.Equal(t, "embedded:hardening/"+h.ID+".yaml", h.Source)
	}
	assert.Equal(t, []string{"apt-daily", "chrony", "containerd", "cron", "docker", "dpkg-db-backup", "e2scrub-all", "exim4-base", "logrotate", "postfix", "postgresql", "rpc-statd", "rpc-statd-notify", "rpcbind", "rsyslog", "ssh", "sysstat", "sysstat-collect", "sysstat-rotate", "sysstat-summary", "unattended-upgrades"}, ids)
}

func TestHardeningUserCatalog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("ssh.yaml", "id: ssh\ndisabled: true\n")
	write("nginx.yaml", "id: nginx\ntitle: nginx\nunits: [nginx.service]\nwhy: it serves files\nbreaks: nothing it does\ndropin: |\n  [Service]\n  ProtectHome=yes\n")
	write("cron.yaml", "id: cron\ntitle: mine\nunits: [cron.service]\nwhy: w\nbreaks: b\ndropin: |\n  [Service]\n  PrivateTmp=yes\n")
	hs, err := LoadHardening(dir)
	require.NoError(t, err)
	byID := map[string]Hardening{}
	for _, h := range hs {
		byID[h.ID] = h
	}
	assert.NotContains(t, byID, "ssh", "a disabled user entry turns the shipped one off")
	assert.Equal(t, "mine", byID["cron"].Title, "a user entry replaces the shipped one")
	assert.Contains(t, byID, "nginx")
	assert.Contains(t, byID, "rsyslog")
}

func TestHardeningValidate(t *testing.T) {
	ok := Hardening{ID: "x", Title: "t", Units: []string{"x.service"}, Why: "w", Breaks: "b", DropIn: "[Service]\nPrivateTmp=yes\n"}
	require.NoError(t, ok.Validate())
	tmpl := ok
	tmpl.Units = []string{"x@.service"}
	require.NoError(t, tmpl.Validate(), "a template: its drop-in applies to every instance")
	for _, tc := range []struct {
		name string
		edit func(*Hardening)
		want string
	}{
		{"bad id", func(h *Hardening) { h.ID = "X Y" }, "id"},
		{"no units", func(h *Hardening) { h.Units = nil }, "units"},
		{"not a service", func(h *Hardening) { h.Units = []string{"x.socket"} }, "want a service or template name"},
		{"instance", func(h *Hardening) { h.Units = []string{"x@y.service"} }, "no instance"},
		{"no room for its drop-in directory", func(h *Hardening) { h.Units = []string{strings.Repeat("x", 246) + ".service"} }, "its drop-in directory's name would be longer than 255"},
		{"no why", func(h *Hardening) { h.Why = " " }, "why: missing"},
		{"no breaks", func(h *Hardening) { h.Breaks = "" }, "breaks: missing"},
		{"empty drop-in", func(h *Hardening) { h.DropIn = "# nothing\n" }, "sets nothing"},
		{"bad section header", func(h *Hardening) { h.DropIn = "[Service\nPrivateTmp=yes\n" }, "invalid section header"},
		{"install section", func(h *Hardening) { h.DropIn = "[Install]\nWantedBy=x.target\n" }, "only [Service] and [Unit]"},
		{"a command", func(h *Hardening) { h.DropIn = "[Service]\nExecStartPre=/bin/rm -rf /\n" }, "runs no commands"},
		{"huge", func(h *Hardening) { h.DropIn = "[Service]\n" + strings.Repeat("#", maxDropIn) }, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := ok
			tc.edit(&h)
			err := h.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestHardeningMalformedUserCatalogIsAnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("id: bad\nunknown_field: 1\n"), 0o644))
	_, err := LoadHardening(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad.yaml")
	_, err = LoadHardening(filepath.Join(dir, "nope"))
	require.Error(t, err)
}

// TestHardeningDocs keeps rules/docs/hardening in step with the catalog.
func TestHardeningDocs(t *testing.T) {
	hs, err := LoadHardening()
	require.NoError(t, err)
	dir := filepath.Join("docs", "hardening")
	want := map[string]string{"README.md": HardeningIndex(hs)}
	for _, h := range hs {
		want[h.ID+".md"] = HardeningMarkdown(h)
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join(dir, "*.md"))
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for name, body := range want {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
		}
	}
	have, err := filepath.Glob(filepath.Join(dir, "*.md"))
	require.NoError(t, err)
	for _, f := range have {
		_, ok := want[filepath.Base(f)]
		assert.True(t, ok, "stale doc page %s", f)
	}
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if !assert.NoError(t, err, "run go test ./rules -update") {
			continue
		}
		assert.Equal(t, body, string(got), "docs/hardening/%s is stale: run go test ./rules -update", name)
	}
}

func FuzzHardening(f *testing.F) {
	f.Add([]byte("id: x\ntitle: t\nunits: [x.service]\nwhy: w\nbreaks: b\ndropin: |\n  [Service]\n  PrivateTmp=yes\n"))
	f.Add([]byte("id: x\ndisabled: true\n"))
	f.Add([]byte("dropin: \"[Service\\nExecStart=/x\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Hardening
		if err := decodeStrict(b, &h); err != nil {
			return
		}
		_ = h.Validate()
		_ = HardeningMarkdown(h)
	})
}
