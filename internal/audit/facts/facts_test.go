package facts

import (
	"encoding/json"
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }
func exe() *fstest.MapFile          { return &fstest.MapFile{Data: []byte("\x7fELF"), Mode: 0o755} }

func parseUnit(t *testing.T, text string) []*unit.Option {
	t.Helper()
	opts, err := unit.ParseConfig([]byte(text))
	require.NoError(t, err)
	return opts
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return string(b)
}

var ecsChain = []unit.Edge{
	{From: "default.target", To: "multi-user.target", Kind: "alias"},
	{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
}

func TestBuildECS(t *testing.T) {
	ecs := readTestdata(t, "ecs.service")
	m := fstest.MapFS{
		"etc/os-release":                 file("NAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID=\"20.04\"\nPRETTY_NAME=\"Ubuntu 20.04.6 LTS\"\n"),
		"etc/machine-id":                 file("uninitialized\n"),
		"lib/systemd/system/ecs.service": file(ecs),
		"usr/libexec/amazon-ecs-init":    exe(),
		"etc/ecs/ecs.config":             file("# set by the image build\nECS_CLUSTER=\"\"\nECS_ENABLE_GPU_SUPPORT=true\n"),
	}
	fsys := rootfs.New(m)
	d, err := Build(fsys, []UnitInput{{
		Name: "ecs.service", State: "enabled", Path: "/lib/systemd/system/ecs.service",
		Fragment: "/lib/systemd/system/ecs.service", StartsAtBoot: true, Chain: ecsChain,
		Options: parseUnit(t, ecs),
	}}, Options{ConfigFiles: []ConfigRequest{{Path: "/etc/amazon/ssm/amazon-ssm-agent.json"}}})
	require.NoError(t, err)

	assert.Equal(t, Schema, d.Schema)
	assert.Equal(t, "ubuntu", d.Image.OSRelease["ID"])
	assert.Equal(t, "20.04", d.Image.OSRelease["VERSION_ID"])
	assert.Equal(t, "uninitialized", d.Image.MachineID)
	assert.True(t, d.Image.FirstBootPresets)

	u := d.Units["ecs.service"]
	require.NotNil(t, u)
	assert.Equal(t, "service", u.Type)
	assert.Equal(t, "simple", u.ServiceType)
	assert.Equal(t, "on-failure", u.Restart)
	assert.Equal(t, Seconds(10), u.RestartSec)
	// Manager defaults, systemd 252's built-ins: 10 s, 5.
	assert.Equal(t, Seconds(10), u.StartLimitIntervalSec)
	assert.Equal(t, 5, u.StartLimitBurst)
	assert.Empty(t, u.RestartPreventExitStatus)
	assert.Equal(t, []string{"docker.service"}, u.Requires)
	assert.True(t, u.SpawnsContainer)
	assert.True(t, u.ActiveAtBoot)
	assert.Equal(t, ecsChain, u.Chain)
	require.NotNil(t, u.ExecStart)
	assert.Equal(t, "/usr/libexec/amazon-ecs-init", u.ExecStart.Path)
	assert.Equal(t, []string{"start"}, u.ExecStart.Args)
	require.NotNil(t, u.ExecStart.Exists)
	assert.True(t, *u.ExecStart.Exists)
	require.Len(t, u.ExecStartPre, 1)
	assert.Equal(t, []EnvironmentFile{
		{Path: "/var/lib/ecs/ecs.config", Optional: true, Exists: false},
		{Path: "/etc/ecs/ecs.config", Optional: true, Exists: true},
	}, u.EnvironmentFiles)

	// The unit's environment files are loaded as config files.
	c := d.ConfigFiles["/etc/ecs/ecs.config"]
	require.NotNil(t, c)
	assert.True(t, c.Exists)
	assert.True(t, c.ParseOK)
	assert.Equal(t, "", c.Keys["ECS_CLUSTER"])
	assert.Equal(t, "true", c.Keys["ECS_ENABLE_GPU_SUPPORT"])
	assert.False(t, d.ConfigFiles["/var/lib/ecs/ecs.config"].Exists)
	ssm := d.ConfigFiles["/etc/amazon/ssm/amazon-ssm-agent.json"]
	require.NotNil(t, ssm)
	assert.Equal(t, "json", ssm.Format)
	assert.False(t, ssm.Exists)

	// The JSON form uses the documented names.
	b, err := json.Marshal(d)
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(b, &generic))
	units := generic["units"].(map[string]any)
	ju := units["ecs.service"].(map[string]any)
	for _, k := range []string{"state", "starts_at_boot", "chain", "exec_start", "restart", "restart_sec",
		"start_limit_interval_sec", "start_limit_burst", "restart_prevent_exit_status", "type",
		"environment_files", "sandboxing", "wants", "requires", "spawns_container", "directives"} {
		assert.Contains(t, ju, k)
	}
	assert.Equal(t, 10.0, ju["restart_sec"])
}

func TestBuildManagerDefaults(t *testing.T) {
	m := fstest.MapFS{
		"etc/systemd/system.conf":                 file("[Manager]\n#DefaultRestartSec=100ms\nDefaultStartLimitIntervalSec=1min\n"),
		"usr/lib/systemd/system.conf.d/50-a.conf": file("[Manager]\nDefaultStartLimitBurst=3\nDefaultRestartSec=2s\n"),
		"etc/systemd/system.conf.d/50-a.conf":     file("[Manager]\nDefaultStartLimitBurst=7\n"),
		"lib/systemd/system.conf.d/90-z.conf":     file("[Manager]\nDefaultRestartSec=bogus\n"),
		"etc/machine-id":                          file("0123456789abcdef0123456789abcdef\n"),
		"etc/systemd/system/x.service":            file(""),
	}
	d, err := Build(rootfs.New(m), []UnitInput{
		{Name: "x.service", Options: parseUnit(t, "[Service]\nExecStart=/bin/x\nRestart=always\n")},
		{Name: "y.service", Options: parseUnit(t, "[Unit]\nStartLimitIntervalSec=0\n[Service]\nStartLimitBurst=2\nRestartSec=1min 30s\nRestartPreventExitStatus=5\nRestartPreventExitStatus=\nRestartPreventExitStatus=1 SIGTERM\n")},
	}, Options{})
	require.NoError(t, err)
	assert.Equal(t, "present", d.Image.MachineID)
	assert.False(t, d.Image.FirstBootPresets)
	// /etc's 50-a.conf shadows /usr/lib's, so burst 7 and RestartSec stays 100ms;
	// 90-z.conf is applied but its bad value is a problem, not an error.
	assert.Equal(t, Seconds(60), d.Manager.DefaultStartLimitIntervalSec)
	assert.Equal(t, 7, d.Manager.DefaultStartLimitBurst)
	assert.Equal(t, Seconds(0.1), d.Manager.DefaultRestartSec)
	assert.Len(t, d.Manager.Problems, 1)
	assert.Equal(t, []string{"/etc/systemd/system.conf", "/etc/systemd/system.conf.d/50-a.conf", "/lib/systemd/system.conf.d/90-z.conf"}, d.Manager.Sources)

	x := d.Units["x.service"]
	assert.Equal(t, Seconds(0.1), x.RestartSec)
	assert.Equal(t, Seconds(60), x.StartLimitIntervalSec)
	assert.Equal(t, 7, x.StartLimitBurst)
	assert.False(t, *x.ExecStart.Exists)

	y := d.Units["y.service"]
	assert.Equal(t, Seconds(0), y.StartLimitIntervalSec)
	assert.Equal(t, 2, y.StartLimitBurst)
	assert.Equal(t, Seconds(90), y.RestartSec)
	assert.Equal(t, []string{"1", "SIGTERM"}, y.RestartPreventExitStatus)
}

func TestBuildMachineID(t *testing.T) {
	tests := []struct {
		name  string
		m     fstest.MapFS
		state string
		first bool
	}{
		{"missing", fstest.MapFS{"etc/os-release": file("ID=debian\n")}, "missing", true},
		{"os-release dir falls back", fstest.MapFS{"etc/os-release/x": file(""), "usr/lib/os-release": file("ID=debian\n"), "etc/machine-id": file("")}, "empty", false},
		{"empty", fstest.MapFS{"etc/machine-id": file("")}, "empty", false},
		{"uninitialized", fstest.MapFS{"etc/machine-id": file("uninitialized\n")}, "uninitialized", true},
		{"masked", fstest.MapFS{"etc/machine-id": &fstest.MapFile{Data: []byte("/dev/null"), Mode: 0o777 | 1<<27}}, "empty", false},
		{"present", fstest.MapFS{"etc/machine-id": file("abc\n")}, "present", false},
		{"directory", fstest.MapFS{"etc/machine-id/x": file("abc\n")}, "unreadable", true},
		{"loop", fstest.MapFS{"etc/machine-id": &fstest.MapFile{Data: []byte("machine-id"), Mode: 0o777 | 1<<27}}, "unreadable", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Build(rootfs.New(tt.m), nil, Options{})
			require.NoError(t, err)
			assert.Equal(t, tt.state, d.Image.MachineID)
			assert.Equal(t, tt.first, d.Image.FirstBootPresets)
		})
	}
}

func TestBuildExecResolution(t *testing.T) {
	m := fstest.MapFS{
		"usr/bin/foo":            exe(),
		"bin":                    &fstest.MapFile{Data: []byte("usr/bin"), Mode: 0o777 | 1<<27},
		"opt/app/run":            &fstest.MapFile{Data: []byte("/opt/app/real"), Mode: 0o777 | 1<<27},
		"opt/app/real":           exe(),
		"opt/app/escape":         &fstest.MapFile{Data: []byte("../../../../usr/bin/foo"), Mode: 0o777 | 1<<27},
		"opt/app/dir/x":          exe(),
		"usr/local/libexec/t@.x": exe(),
		"srv/bin/tool":           exe(),
	}
	fsys := rootfs.New(m)
	tests := []struct {
		name     string
		unit     string
		exec     string
		exists   *bool
		resolved string
	}{
		{"absolute", "a.service", "/usr/bin/foo --x", ptr(true), "/usr/bin/foo"},
		{"through dir link", "a.service", "/bin/foo", ptr(true), "/usr/bin/foo"},
		{"absolute link re-anchored", "a.service", "/opt/app/run", ptr(true), "/opt/app/real"},
		{"dotdot clamped at root", "a.service", "/opt/app/escape", ptr(true), "/usr/bin/foo"},
		{"missing", "a.service", "-/usr/bin/nope", ptr(false), ""},
		{"directory is not an executable", "a.service", "/opt/app/dir", ptr(false), ""},
		{"plain name on PATH", "a.service", "foo", ptr(true), "/usr/bin/foo"},
		{"plain name missing", "a.service", "bar", ptr(false), ""},
		{"relative with slash refused", "a.service", "usr/bin/foo", ptr(false), ""},
		{"specifier expanded", "t@1.service", "/usr/local/libexec/%p@.x", ptr(true), "/usr/local/libexec/t@.x"},
		{"variable unknown", "a.service", "$FOO/bin", nil, ""},
		{"ExecSearchPath", "s.service", "tool", ptr(true), "/srv/bin/tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := "[Service]\nExecStart=" + tt.exec + "\n"
			if tt.unit == "s.service" {
				text += "ExecSearchPath=/srv/bin\n"
			}
			d, err := Build(fsys, []UnitInput{{Name: tt.unit, Options: parseUnit(t, text)}}, Options{})
			require.NoError(t, err)
			e := d.Units[tt.unit].ExecStart
			require.NotNil(t, e)
			assert.Equal(t, tt.exists, e.Exists)
			assert.Equal(t, tt.resolved, e.Resolved)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestBuildActivatedAtBoot(t *testing.T) {
	sockChain := []unit.Edge{{From: "sockets.target", To: "cups.socket", Kind: ".wants"}}
	d, err := Build(rootfs.New(fstest.MapFS{}), []UnitInput{
		{Name: "cups.socket", StartsAtBoot: true, Chain: sockChain},
		{Name: "cups.service", ActivatedBy: []string{"cups.socket"}},
		{Name: "idle.service", ActivatedBy: []string{"idle.socket"}},
		{Name: "idle.socket"},
	}, Options{})
	require.NoError(t, err)
	c := d.Units["cups.service"]
	assert.False(t, c.StartsAtBoot)
	assert.True(t, c.ActiveAtBoot)
	assert.Equal(t, append(sockChain, unit.Edge{From: "cups.socket", To: "cups.service", Kind: "socket"}), c.Chain)
	assert.False(t, d.Units["idle.service"].ActiveAtBoot)
	assert.Empty(t, d.Units["idle.service"].Chain)
}

// TestBuildDependencyListsDoNotReset: an empty Wants=, Requires= or After=
// (as in a drop-in) adds nothing and removes nothing, as systemd's
// config_parse_unit_deps does; an empty WantedBy= resets, as its
// config_parse_strv does.
func TestBuildDependencyListsDoNotReset(t *testing.T) {
	opts := parseUnit(t, "[Unit]\nWants=a.service\nRequires=r.service\nAfter=n.target\n"+
		"[Install]\nWantedBy=multi-user.target\n"+
		"[Unit]\nWants=\nRequires=\nAfter=\nWants=b.service\n[Install]\nWantedBy=\nWantedBy=graphical.target\n")
	d, err := Build(rootfs.New(fstest.MapFS{}), []UnitInput{{Name: "x.service", Options: opts}}, Options{})
	require.NoError(t, err)
	u := d.Units["x.service"]
	assert.Equal(t, []string{"a.service", "b.service"}, u.Wants)
	assert.Equal(t, []string{"r.service"}, u.Requires)
	assert.Equal(t, []string{"n.target"}, u.After)
	assert.Equal(t, []string{"graphical.target"}, u.WantedBy)
}

func TestBuildConfigFiles(t *testing.T) {
	m := fstest.MapFS{
		"etc/a.json":           file(`{"agent": {}}`),
		"etc/bad.json":         file(`{"agent": `),
		"etc/b.config":         file("A=1\nnot a line\n"),
		"etc/c.d/one":          file(""),
		"etc/c.d/two":          file(""),
		"etc/raw.toml":         file("x"),
		"etc/loop":             &fstest.MapFile{Data: []byte("loop"), Mode: 0o777 | 1<<27},
		"etc/big.config":       &fstest.MapFile{Data: make([]byte, maxFileSize+1), Mode: 0o644},
		"etc/systemd/system/x": file(""),
	}
	d, err := Build(rootfs.New(m), nil, Options{ConfigFiles: []ConfigRequest{
		{Path: "/etc/a.json"}, {Path: "/etc/bad.json"}, {Path: "/etc/b.config"},
		{Path: "/etc/c.d"}, {Path: "/etc/raw.toml"}, {Path: "/etc/loop"},
		{Path: "/etc/big.config"}, {Path: "etc/../../etc/a.json"}, {Path: "/etc/none", Format: "dir"},
		{Path: "/etc/c.d/"},
	}})
	require.NoError(t, err)
	cf := d.ConfigFiles
	assert.Len(t, cf, 8)
	// A guessed format becomes dir when the path is a directory.
	assert.Equal(t, "dir", cf["/etc/c.d"].Format)
	assert.True(t, cf["/etc/a.json"].ParseOK)
	assert.True(t, cf["/etc/bad.json"].Exists)
	assert.False(t, cf["/etc/bad.json"].ParseOK)
	assert.False(t, cf["/etc/b.config"].ParseOK)
	assert.Equal(t, "1", cf["/etc/b.config"].Keys["A"])
	assert.Equal(t, []string{"one", "two"}, cf["/etc/c.d"].Entries)
	assert.True(t, cf["/etc/c.d"].ParseOK)
	assert.Equal(t, "file", cf["/etc/raw.toml"].Format)
	assert.True(t, cf["/etc/raw.toml"].ParseOK)
	assert.True(t, cf["/etc/loop"].Exists)
	assert.NotEmpty(t, cf["/etc/loop"].Error)
	assert.False(t, cf["/etc/big.config"].ParseOK)
	assert.Contains(t, cf["/etc/big.config"].Error, "larger than")
	assert.False(t, cf["/etc/none"].Exists)
}

func TestBuildRejectsDuplicateUnits(t *testing.T) {
	_, err := Build(rootfs.New(fstest.MapFS{}), []UnitInput{{Name: "a.service"}, {Name: "a.service"}}, Options{})
	require.Error(t, err)
	_, err = Build(nil, nil, Options{})
	require.Error(t, err)
}

func TestBuildOSReleaseFallback(t *testing.T) {
	tests := []struct {
		name string
		m    fstest.MapFS
		id   string
	}{
		{"etc", fstest.MapFS{"etc/os-release": file("ID=ubuntu\n"), "usr/lib/os-release": file("ID=debian\n")}, "ubuntu"},
		{"etc is a directory", fstest.MapFS{"etc/os-release/x": file(""), "usr/lib/os-release": file("ID=debian\n")}, "debian"},
		{"etc link to usr/lib", fstest.MapFS{"etc/os-release": &fstest.MapFile{Data: []byte("../usr/lib/os-release"), Mode: 0o777 | 1<<27}, "usr/lib/os-release": file("ID=debian\n")}, "debian"},
		{"none", fstest.MapFS{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Build(rootfs.New(tt.m), nil, Options{})
			require.NoError(t, err)
			assert.Equal(t, tt.id, d.Image.OSRelease["ID"])
		})
	}
}

// warningSource is a tree whose reader says it may be stale, as xfs.FS
// does for a dirty log.
type warningSource struct{ fstest.MapFS }

func (warningSource) Warnings() []string { return []string{"xfs: the log is dirty"} }

// TestBuildImageWarnings checks a reader's warnings reach image.warnings,
// and that a reader without any leaves the field out of the JSON.
func TestBuildImageWarnings(t *testing.T) {
	tree := fstest.MapFS{"etc/os-release": {Data: []byte("ID=amzn\n")}}
	d, err := Build(rootfs.New(warningSource{tree}), nil, Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"xfs: the log is dirty"}, d.Image.Warnings)
	d, err = Build(rootfs.New(tree), nil, Options{})
	require.NoError(t, err)
	b, err := json.Marshal(d.Image)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "warnings")
}
