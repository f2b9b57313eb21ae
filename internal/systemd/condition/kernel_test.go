package condition

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// devname is kmod-static-nodes.service's condition, in every Debian and
// Ubuntu image.
const devname = "/lib/modules/%v/modules.devname"

// TestKernelSpecifier: %v is decided by the kernels the machine may boot
// (the assumed one, else each the image installs), and a path whose
// directory before a machine specifier is not in the image fails
// whatever the machine's values.
func TestKernelSpecifier(t *testing.T) {
	mods := func(files map[string]string) fstest.MapFS {
		m := fstest.MapFS{"lib": mlink("usr/lib"), "usr/lib": mdir()}
		for k, v := range files {
			if strings.HasPrefix(k, "/") {
				m[k[1:]] = mfile(v)
				continue
			}
			m["usr/lib/modules/"+k] = mfile(v)
		}
		return m
	}
	for _, tc := range []struct {
		name           string
		fs             fstest.MapFS
		assume         []string
		setting, value string
		want           Verdict
		reason         string
	}{
		{"one kernel", mods(map[string]string{"6.1.0-13-amd64/modules.devname": "fuse\n"}), nil,
			"ConditionFileNotEmpty", devname, True, "the image installs kernel 6.1.0-13-amd64"},
		{"one kernel, empty file", mods(map[string]string{"6.1.0-13-amd64/modules.devname": ""}), nil,
			"ConditionFileNotEmpty", devname, False, "the image installs kernel 6.1.0-13-amd64"},
		{"negated", mods(map[string]string{"6.1.0-13-amd64/modules.devname": "fuse\n"}), nil,
			"ConditionFileNotEmpty", "!" + devname, False, "6.1.0-13-amd64"},
		{"two kernels alike", mods(map[string]string{"6.1.0-12-amd64/modules.devname": "a\n", "6.1.0-13-amd64/modules.devname": "b\n"}), nil,
			"ConditionFileNotEmpty", devname, True, "for each: "},
		{"two kernels differ", mods(map[string]string{"6.1.0-12-amd64/modules.dep": "", "6.1.0-13-amd64/modules.devname": "b\n"}), nil,
			"ConditionFileNotEmpty", devname, Unknown, "specifier %v depends on the machine"},
		{"two kernels, one assumed", mods(map[string]string{"6.1.0-12-amd64/modules.dep": "", "6.1.0-13-amd64/modules.devname": "b\n"}), []string{"kernel-version=6.1.0-12-amd64"},
			"ConditionFileNotEmpty", devname, False, "assumed (--assume kernel-version)"},
		{"no kernel, no modules directory", fstest.MapFS{}, nil,
			"ConditionFileNotEmpty", devname, False, "/lib/modules does not exist in the image"},
		{"no kernel, negated", fstest.MapFS{}, nil,
			"ConditionPathExists", "!" + devname, True, "/lib/modules does not exist"},
		{"a file where the directory is", fstest.MapFS{"lib": mfile("")}, nil,
			"ConditionPathIsDirectory", "/lib/%H/x", False, "/lib is not a directory"},
		{"other machine specifier, directory absent", fstest.MapFS{}, nil,
			"ConditionPathExists", "/var/lib/x/%H/%m", False, "/var/lib/x does not exist"},
		{"other machine specifier, directory present", fstest.MapFS{"var/lib/x": mdir()}, nil,
			"ConditionPathExists", "/var/lib/x/%H", Unknown, "specifier %H depends on the machine"},
		{"the machine's directory", fstest.MapFS{}, nil,
			"ConditionPathExists", "/run/x/%v", Unknown, "specifier %v depends on the machine"},
		{"a glob before it", fstest.MapFS{}, nil,
			"ConditionPathExistsGlob", "/li*/%v", Unknown, "specifier %v depends on the machine"},
		{"not a path check", fstest.MapFS{}, nil,
			"ConditionKernelCommandLine", "x=%v", Unknown, "specifier %v depends on the machine"},
		{"not a path check, one kernel", mods(map[string]string{"6.1.0-13-amd64/modules.dep": "", "/etc/kernel/cmdline": "ro quiet\n"}), nil,
			"ConditionKernelCommandLine", "x=%v", False, "the image installs kernel 6.1.0-13-amd64"},
		{"kernel version, two kernels alike", mods(map[string]string{"6.1.0-12-amd64/modules.dep": "", "6.1.0-13-amd64/modules.dep": ""}), nil,
			"ConditionKernelVersion", ">=6.1", True, "the image installs 2 kernels"},
		{"kernel version, two kernels differ", mods(map[string]string{"6.1.0-12-amd64/modules.dep": "", "6.1.0-13-amd64/modules.dep": ""}), nil,
			"ConditionKernelVersion", "6.1.0-13-*", Unknown, "6.1.0-12-amd64 false, 6.1.0-13-amd64 true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := one(env(t, tc.fs, false, tc.assume...), "kmod-static-nodes.service", tc.setting, tc.value)
			assert.Equal(t, tc.want, c.Verdict, c.Reason)
			assert.Contains(t, c.Reason, tc.reason)
		})
	}
}

// TestOracleKernelSpecifier: systemd-analyze condition, with %v the
// running kernel's release, over roots that install that kernel's
// modules or not, against the model told (or reading) the same kernel.
func TestOracleKernelSpecifier(t *testing.T) {
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	release := unix.ByteSliceToString(uts.Release[:])
	dir := "/usr/lib/modules/" + release
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			for _, tc := range []struct {
				name    string
				entries []systemdtest.Entry
				// installed: the image installs the running kernel only,
				// so the model needs no assumption.
				installed bool
			}{
				{"no modules", nil, false},
				{"devname", []systemdtest.Entry{systemdtest.File(dir+"/modules.devname", "fuse\n")}, true},
				{"empty devname", []systemdtest.Entry{systemdtest.File(dir+"/modules.devname", "")}, true},
				{"no devname", []systemdtest.Entry{systemdtest.File(dir+"/modules.dep", "")}, true},
				{"another kernel's devname", []systemdtest.Entry{
					systemdtest.File(dir+"/modules.dep", ""),
					systemdtest.File("/usr/lib/modules/0.0.1-other/modules.devname", "fuse\n"),
				}, false},
			} {
				var up string
				if tc.entries != nil {
					up = sd.Upper(t, tc.entries)
				}
				for _, cond := range []string{
					"ConditionFileNotEmpty=" + devname,
					"ConditionFileNotEmpty=!" + devname,
					"ConditionPathIsDirectory=/lib/modules/%v",
					"ConditionPathExists=/lib/modules/%v/kernel",
					"ConditionDirectoryNotEmpty=/usr/lib/modules/%v/",
				} {
					out := sd.RunOver(t, up, "", "env", "SYSTEMD_LOG_LEVEL=info", "systemd-analyze", "condition", cond)
					all := string(out.Stdout) + string(out.Stderr)
					var want Verdict
					switch {
					case strings.Contains(all, " succeeded."):
						want = True
					case strings.Contains(all, " failed."):
						want = False
					default:
						require.Fail(t, "no verdict", "%s %s:\n%s", tc.name, cond, all)
					}
					setting, value, _ := strings.Cut(cond, "=")
					view := sd.View(t, up)
					assumed := []string{"kernel-version=" + release}
					e, err := NewEnv(view, false, assumptionsOf(t, assumed))
					require.NoError(t, err)
					c := one(e, "test.service", setting, value)
					assert.Equal(t, want, c.Verdict, "%s %s assumed: %s", tc.name, cond, c.Reason)
					if tc.installed || tc.entries == nil {
						e, err := NewEnv(view, false, nil)
						require.NoError(t, err)
						c := one(e, "test.service", setting, value)
						assert.Equal(t, want, c.Verdict, "%s %s: %s", tc.name, cond, c.Reason)
					}
				}
			}
		})
	}
}

func assumptionsOf(t *testing.T, kvs []string) Assumptions {
	a := Assumptions{}
	for _, kv := range kvs {
		require.NoError(t, a.Set(kv))
	}
	return a
}
