package boot

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// FuzzCloudInitConfig feeds hostile cloud.cfg.d files, ds-identify.cfg
// files and command lines to both versions' readers and the decision:
// nothing may panic, and the datasource list never holds an empty name.
func FuzzCloudInitConfig(f *testing.F) {
	f.Add("datasource_list: [ Ec2, None ]\n", "policy: search,found=all,maybe=none,notfound=enabled\n", "ci.ds=GCE")
	f.Add("datasource_list:\n  - Ec2\n", "datasource: 'Ec2'\n", "cc:{'datasource_list': ['Ec2']} end_cc")
	f.Add("\"datasource_list\" : [ 'a' ,, \"b\" ]\\\n", "policy:\\", "ds=nocloud;s=x cloud-init=disabled")
	f.Add("NoCloud:\n  seedfrom: x\x00\n", "#policy: x\n", "ci.di.policy=,,found=")
	f.Fuzz(func(t *testing.T, cfg, dicfg, cmdline string) {
		m := fstest.MapFS{
			"etc/cloud/cloud.cfg.d/99.cfg": {Data: []byte(cfg)},
			"etc/cloud/cloud.cfg":          {Data: []byte(cfg + "\n" + dicfg)},
			"etc/cloud/ds-identify.cfg":    {Data: []byte(dicfg)},
		}
		fsys := rootfs.New(m)
		for _, di := range []dsIdentify{
			{policy: "search,notfound=disabled", policyNoDMI: "search,notfound=enabled", dslist: "Ec2 None", checks: map[string]bool{"Ec2": true, "NoCloud": true}, nocloudCmdline: true},
			{policy: "search", policyNoDMI: "x", dslist: "A", checks: map[string]bool{"MAAS": true}, isDisabled: true, dsKey: true, semicolon: true, grepConfig: true, flowSeq: true, trimEnds: true, seedfrom: true},
			{policy: "search", policyNoDMI: "search,maybe=all,notfound=enabled", dslist: "MAAS NoCloud", checks: map[string]bool{"MAAS": true, "NoCloud": true}, isDisabled: true, dsKey: true, semicolon: true, grepConfig: true, grepQuote23: true, trimEnds: true, seedfrom: true, maasConfig: true},
		} {
			cfgs, _ := readConfigFiles(fsys)
			for _, w := range ifsFields(di.readDatasourceList(cfgs, cmdline)) {
				if w == "" {
					t.Fatal("empty datasource name")
				}
			}
			di.readConfig([]byte(dicfg))
			parsePolicy(dicfg, parsePolicy(cfg, diPolicy{}))
			for _, ds := range []string{"", "none", "Ec2"} {
				rc, _, _ := di.main(fsys, shReadFirst(cmdline), Machine{Datasource: ds, Architecture: "x86-64"})
				if rc < diFound || rc > diError {
					t.Fatalf("rc %d", rc)
				}
			}
		}
	})
}

// FuzzCloudInitScripts feeds hostile generator and ds-identify scripts
// to the extractors: nothing may panic, and a default read back is one
// the script assigns, no longer than the script (an escaped "\${" is
// the literal "${", as the shell reads it).
func FuzzCloudInitScripts(f *testing.F) {
	f.Add("\nDI_DEFAULT_POLICY=\"search,notfound=${DI_DISABLED}\"\nDI_DSLIST_DEFAULT=\"A \\\nB\"\n")
	f.Add("CLOUD_SYSTEM_TARGET=\"/x\"\n    dsidentify=\"/y\"\nCLOUD_TARGET_NAME=\"cloud-init.target\"\n")
	f.Add("\nDI_DEFAULT_POLICY=\"\\")
	f.Add("\tout=$(grep \"$key\\\"\\?:\" \"$@\")\n  i?86 | x86_64) def=${DI_DEFAULT_POLICY} ;;\n\tds)  _rc_dsname=\"$val\" ;;\ncheck_config \"MAAS\"")
	// The scripts of other releases: the trixie root's ds-identify with
	// ciVariants' edits, and upstream's scripts when AMILINT_CLOUDINIT_SCRIPTS
	// names them.
	if b, err := os.ReadFile(filepath.Join("..", "..", "..", ".cache", "trixie-root", "usr/lib/cloud-init/ds-identify")); err == nil {
		for _, v := range ciVariants() {
			f.Add(v.edit(string(b)))
		}
	}
	if dir := os.Getenv(cloudInitScriptsEnv); dir != "" {
		scripts, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
		for _, p := range scripts {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range []string{"DI_DEFAULT_POLICY", "DI_DEFAULT_POLICY_NO_DMI", "DI_DSLIST_DEFAULT"} {
			if v := shDefault(s, name); v != "" && (!strings.Contains(s, "\n"+name+`="`) || len(v) > len(s)) {
				t.Fatalf("%s=%q", name, v)
			}
		}
		shAssign([]byte(s), "dsidentify")
		m := fstest.MapFS{
			"gen":                 {Data: []byte(s), Mode: 0o755},
			"usr/lib/ds-identify": {Data: []byte(s), Mode: 0o755},
		}
		fsys := rootfs.New(m)
		readCloudInitGenerator(fsys, "/gen")
		readDSIdentify(fsys, "/usr/lib/ds-identify")
		shReadLines([]byte(s))
	})
}

// dscheckFuncRef is the regular expression dscheckNames replaces, kept as
// its reference.
var dscheckFuncRef = regexp.MustCompile(`(?m)^dscheck_([A-Za-z0-9_]+)\(\) \{`)

// FuzzDSCheckNames: dscheckNames finds exactly the names the regular
// expression does, in the same order.
func FuzzDSCheckNames(f *testing.F) {
	for _, root := range []string{"debian-root", "trixie-root"} {
		if b, err := os.ReadFile(filepath.Join("..", "..", "..", ".cache", root, "usr/lib/cloud-init/ds-identify")); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("dscheck_Ec2() {\n}\n  dscheck_X() {\ndscheck_() {\ndscheck_A_1() {x\n\ndscheck_B()  {\ndscheck_dscheck_C() {")
	f.Add("xdscheck_A() {\ndscheck_é() {\r\ndscheck_Z() {")
	f.Fuzz(func(t *testing.T, s string) {
		var want []string
		for _, m := range dscheckFuncRef.FindAllStringSubmatch(s, -1) {
			want = append(want, m[1])
		}
		got := slices.Collect(dscheckNames(s))
		if !slices.Equal(got, want) {
			t.Fatalf("dscheckNames = %q, the expression finds %q", got, want)
		}
	})
}
