package boot

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package generators' oracle variants run the real scripts (copied
// into testdata/generators, see its README) under systemd, installed where
// the package installs them, with the units they link to.

// pkgGeneratorNames are the generators the model runs besides sysv.
func pkgGeneratorNames() []string {
	var out []string
	for _, g := range pkgGenerators {
		// systemd-getty-generator, under the oracle's systemd, reads
		// the test host's consoles, or takes a container's branch when
		// the host is one: the boot oracles keep it masked, and
		// TestOracleGetty compares it on its own with a virtual
		// machine's consoles.
		if g.name != gettyGeneratorName {
			out = append(out, g.name)
		}
	}
	return out
}

// generatorExe installs testdata/generators/NAME at dir/NAME.
func generatorExe(t *testing.T, dir, name string) op {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "generators", name))
	require.NoError(t, err)
	return exe(dir+"/"+name, string(data))
}

const genDir = "/usr/lib/systemd/system-generators"

// enabledTemplate is a service NAME.service enabled in multi-user.target
// and its template NAME@.service, as the packages ship them.
func enabledTemplate(name string) []op {
	return []op{
		file("/usr/lib/systemd/system/"+name+".service", "[Service]\nType=oneshot\nExecStart=/bin/true\nRemainAfterExit=yes\n"),
		file("/usr/lib/systemd/system/"+name+"@.service", svc),
		link("/etc/systemd/system/multi-user.target.wants/"+name+".service", "/lib/systemd/system/"+name+".service"),
	}
}

// genPostgresqlOps are clusters postgresql-generator starts or not: a
// start.conf saying auto (with comments and blanks), manual, disabled,
// auto twice; none (auto); a dangling postgresql.conf link; no
// postgresql.conf; a hidden version; a version whose postgres binary is
// gone or not executable; and a start.conf that is a directory, which
// ends the script before the clusters after it.
func genPostgresqlOps(t *testing.T) []op {
	ops := append(enabledTemplate("postgresql"), generatorExe(t, genDir, "postgresql-generator"))
	cluster := func(v, c, startConf string) {
		ops = append(ops, file("/etc/postgresql/"+v+"/"+c+"/postgresql.conf", "port = 5432\n"))
		if startConf != "" {
			ops = append(ops, file("/etc/postgresql/"+v+"/"+c+"/start.conf", startConf))
		}
	}
	for _, v := range []string{"15", "16", "17", ".9"} {
		ops = append(ops, exe("/usr/lib/postgresql/"+v+"/bin/postgres", "#!/bin/sh\n"))
	}
	ops = append(ops, file("/usr/lib/postgresql/14/bin/postgres", "#!/bin/sh\n"))
	cluster("15", "main", "# Automatic startup\nauto\n")
	cluster("15", "manual", "manual\n")
	cluster("15", "disabled", "disabled\n")
	cluster("15", "commented", "# comment\n\n  auto\t # trailing\n   \n")
	cluster("15", "twice", "auto\nauto\n")
	cluster("15", "nostart", "")
	cluster("15", "noeol", "auto")
	ops = append(ops, link("/etc/postgresql/15/dead/postgresql.conf", "/nowhere/postgresql.conf"),
		file("/etc/postgresql/15/noconf/start.conf", "auto\n"))
	cluster(".9", "main", "auto\n")
	cluster("13", "main", "auto\n") // no /usr/lib/postgresql/13
	cluster("14", "main", "auto\n") // postgres not executable
	cluster("16", "abort", "")
	ops = append(ops, file("/etc/postgresql/16/abort/start.conf/x", ""))
	cluster("17", "main", "auto\n")
	return ops
}

// genOpenvpnOps are openvpn-generator's cases: /etc/default/openvpn's
// AUTOSTART unset (every *.conf), a list, "none", "" and single quotes.
func genOpenvpnOps(t *testing.T, defaults string) []op {
	ops := append(enabledTemplate("openvpn"), generatorExe(t, genDir, "openvpn-generator"),
		file("/etc/openvpn/home.conf", "dev tun\n"),
		file("/etc/openvpn/office.conf", "dev tun\n"),
		file("/etc/openvpn/.hidden.conf", "dev tun\n"),
		file("/etc/openvpn/notes.txt", "x\n"),
		link("/etc/openvpn/dead.conf", "/nowhere"))
	if defaults != "" {
		ops = append(ops, file("/etc/default/openvpn", defaults))
	}
	return ops
}

// genPostfixOps has postfix-instance-generator with a main.cf naming
// instance directories: without postconf in the root (the standard
// roots) only the default instance starts.
func genPostfixOps(t *testing.T) []op {
	return append(enabledTemplate("postfix"), generatorExe(t, genDir, "postfix-instance-generator"),
		file("/etc/postfix/main.cf", "myhostname = example\nmulti_instance_directories = /etc/postfix-out\n"),
		file("/etc/postfix-out/main.cf", "multi_instance_name = postfix-out\n"))
}

// genLookupOps exercise execute_directories' choice of a generator: a
// dangling link, a directory and a non-executable file in earlier
// directories leave the name to the next one; an empty file masks it.
func genLookupOps(t *testing.T) []op {
	ops := append(genPostgresqlOps(t),
		link("/etc/systemd/system-generators/postgresql-generator", "/nowhere"))
	ops = append(ops, genOpenvpnOps(t, "")...)
	ops = append(ops, file("/etc/systemd/system-generators/openvpn-generator", ""))
	ops = append(ops, genPostfixOps(t)...)
	ops = append(ops, file("/usr/local/lib/systemd/system-generators/postfix-instance-generator", "#!/bin/sh\nexit 0\n"))
	// systemd-sysv-generator behind a directory of its name.
	ops = append(ops,
		file("/etc/systemd/system-generators/systemd-sysv-generator/x", ""),
		exe("/etc/init.d/lookup-legacy", "#!/bin/sh\n"),
		link("/etc/rc2.d/S01lookup-legacy", "../init.d/lookup-legacy"))
	return ops
}

// generatorVariants are the oracle variants of the package generators.
func generatorVariants(t *testing.T) map[string][]op {
	return map[string][]op{
		"gen-postgresql":     genPostgresqlOps(t),
		"gen-openvpn-unset":  genOpenvpnOps(t, ""),
		"gen-openvpn-list":   genOpenvpnOps(t, "# AUTOSTART=\"all\"\nAUTOSTART=\"home missing\"\n  AUTOSTART=\"office home\"  # two\n"),
		"gen-openvpn-none":   genOpenvpnOps(t, "AUTOSTART=none\n"),
		"gen-openvpn-empty":  genOpenvpnOps(t, "AUTOSTART=\"\"\n"),
		"gen-openvpn-single": genOpenvpnOps(t, "export AUTOSTART='office'\n"),
		"gen-openvpn-plain":  genOpenvpnOps(t, "AUTOSTART=home\n"),
		// ln -s of openvpn@../x.service fails (no directory openvpn@..):
		// set -e ends the script before home.
		"gen-openvpn-slash":    append(genOpenvpnOps(t, "AUTOSTART=\"../x home\"\n"), file("/etc/x.conf", "dev tun\n")),
		"gen-postfix":          genPostfixOps(t),
		"gen-generator-lookup": genLookupOps(t),
	}
}

// TestStartConf is the sed of postgresql-generator on start.conf texts.
func TestStartConf(t *testing.T) {
	for in, want := range map[string]string{
		"auto\n":                      "auto",
		"# Automatic startup\nauto\n": "auto",
		"  auto  # x\n\n":             "auto",
		"auto":                        "auto",
		"manual\n":                    "manual",
		"auto\nauto\n":                "auto\nauto",
		"\t\v\r\n":                    "",
		"":                            "",
		"au#to\n":                     "au",
		"auto\r\n":                    "auto",
	} {
		assert.Equal(t, want, startConf([]byte(in)), "%q", in)
	}
}

// TestShellAssignment reads AUTOSTART= as the shell would, for the forms
// the model reads, and ignores the others.
func TestShellAssignment(t *testing.T) {
	for in, want := range map[string]string{
		"AUTOSTART=all\n":                      "all",
		"AUTOSTART=\"a b\"\n":                  "a b",
		"AUTOSTART='a b' # c\n":                "a b",
		"  export AUTOSTART=x\n":               "x",
		"AUTOSTART=a\nAUTOSTART=b\n":           "b",
		"AUTOSTART=\"$X\"\n":                   "<unset>",
		"AUTOSTART=$X\n":                       "<unset>",
		"AUTOSTART=\"a\"b\n":                   "<unset>",
		"AUTOSTART=\"open\n":                   "<unset>",
		"#AUTOSTART=all\n":                     "<unset>",
		"AUTOSTART=a; X=b\n":                   "<unset>",
		"AUTOSTART=\"\"\n":                     "",
		"AUTOSTART=\n":                         "",
		"AUTOSTART=all#x\n":                    "all#x",
		"XAUTOSTART=all\n":                     "<unset>",
		"AUTOSTART=home\nAUTOSTART=\"$(x)\"\n": "home",
	} {
		v, ok := shellAssignment([]byte(in), "AUTOSTART")
		if !ok {
			v = "<unset>"
		}
		assert.Equal(t, want, v, "%q", in)
	}
}

// TestStrverscmp compares with glibc's strverscmp on names conf_init_dir
// sorts (the values are what glibc returns, by sign).
func TestStrverscmp(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"a", "b", -1}, {"9.conf", "10.conf", -1}, {"010", "09", -1}, {"000", "00", -1},
		{"a01", "a1", -1}, {"1.2", "1.10", -1}, {"x", "x", 0}, {"00-a.conf", "0-b.conf", -1},
		{"foo10", "foo9", 1}, {"abc", "ab", 1},
	} {
		got := strverscmp(c.a, c.b)
		assert.Equal(t, c.want, cmp.Compare(got, 0), "%q %q", c.a, c.b)
	}
}

// TestNFSEscape is nfs-utils' systemd_escape.
func TestNFSEscape(t *testing.T) {
	for in, want := range map[string]string{
		"/run/rpc_pipefs":   "run-rpc_pipefs",
		"//run//x//":        "run-x",
		"/":                 "-",
		"/.hidden/a-b":      `\x2ehidden-a\x2db`,
		"/var/lib/nfs/pipe": "var-lib-nfs-pipe",
		"rel/x y":           `rel-x\x20y`,
	} {
		assert.Equal(t, want, nfsEscape(in), in)
	}
}

// FuzzPackageGenerators runs the ported generators over arbitrary
// /etc/default/openvpn, main.cf and start.conf texts: the readers never
// panic, a value read is part of its file, and the output loads.
func FuzzPackageGenerators(f *testing.F) {
	f.Add([]byte("AUTOSTART=\"home office\"\n"), []byte("multi_instance_directories = /etc/p\n  /q\n"), []byte("auto\n"))
	f.Add([]byte("export AUTOSTART='x' # c\nAUTOSTART=none\n"), []byte("#\nmulti_instance_name=\n"), []byte("# x\n manual \n"))
	f.Fuzz(func(t *testing.T, defaults, mainCF, startConf []byte) {
		if v, ok := shellAssignment(defaults, "AUTOSTART"); ok && !bytes.Contains(defaults, []byte(v)) {
			t.Fatalf("AUTOSTART %q is not in the file", v)
		}
		files := map[string]string{
			"etc/default/openvpn":                    string(defaults),
			"etc/openvpn/a.conf":                     "",
			"etc/postfix/main.cf":                    string(mainCF),
			"etc/p/main.cf":                          string(mainCF),
			"etc/postgresql/15/main/postgresql.conf": "",
			"etc/postgresql/15/main/start.conf":      string(startConf),
		}
		for _, g := range pkgGeneratorNames() {
			files["usr/lib/systemd/system-generators/"+g] = "x"
		}
		files["usr/sbin/postconf"] = "x"
		files["usr/lib/postgresql/15/bin/postgres"] = "x"
		fsys := mapRoot(files)
		for p, mf := range fsys.Source().(fstest.MapFS) {
			if strings.Contains(p, "generators/") || strings.HasSuffix(p, "postconf") || strings.HasSuffix(p, "/postgres") {
				mf.Mode = 0o755
			}
		}
		if v, ok := postfixMainCF(fsys, "etc/postfix", "multi_instance_directories"); ok && len(v) > len(mainCF) {
			t.Fatalf("value %q longer than main.cf", v)
		}
		g, err := Load(fsys, 252)
		if err != nil {
			t.Fatal(err)
		}
		g.Boot()
	})
}
