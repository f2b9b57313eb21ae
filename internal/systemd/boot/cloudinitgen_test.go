package boot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// fakeMachines are the DMI data (/sys/class/dmi/id) of the machines the
// cloud-init oracle boots on, by the datasource each offers: the vendor
// strings ds-identify's dscheck_ functions look for. "none" has DMI and
// nothing in it.
var fakeMachines = map[string]map[string]string{
	"Ec2": {"sys_vendor": "Amazon EC2", "product_name": "t3.micro", "chassis_asset_tag": "Amazon EC2",
		"product_uuid": "ec2e1916-9099-7caf-fd21-012345abcdef", "product_serial": "ec2e1916-9099-7caf-fd21-012345abcdef"},
	"GCE":       {"sys_vendor": "Google", "product_name": "Google Compute Engine", "product_serial": "GoogleCloud-0123"},
	"Azure":     {"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine", "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77"},
	"OpenStack": {"sys_vendor": "OpenStack Foundation", "product_name": "OpenStack Nova"},
	"Oracle":    {"sys_vendor": "QEMU", "product_name": "Standard PC", "chassis_asset_tag": "OracleCloud.com"},
	"none":      {},
}

// ubuntuDSList is the datasource_list Ubuntu's cloud-init package
// writes to /etc/cloud/cloud.cfg.d/90_dpkg.cfg by default.
const ubuntuDSList = "[ NoCloud, ConfigDrive, OpenNebula, DigitalOcean, Azure, AltCloud, OVF, MAAS, GCE, OpenStack, " +
	"CloudSigma, SmartOS, Bigstep, Scaleway, AliYun, Ec2, CloudStack, Hetzner, IBMCloud, Oracle, Exoscale, RbxCloud, " +
	"UpCloud, VMware, Vultr, LXD, NWCS, Akamai, WSL, None ]"

// ciCase is one boot of the cloud-init oracle: the image's changes, the
// kernel command line, the machine's datasource and architecture.
type ciCase struct {
	ops     []op
	cmdline string
	machine string // a key of fakeMachines
	arch    string // "" x86-64, or "arm64"
}

// ciCases are the cloud-init oracle's boots, for both cloud-init
// versions: the datasource_list forms of cloud.cfg.d, ds-identify.cfg
// policies, the kernel command line's keys, the disable files, the seeds
// and configuration ds-identify finds in the image, ds-identify missing.
func ciCases() map[string]ciCase {
	cfg := func(name, text string) op { return file("/etc/cloud/cloud.cfg.d/"+name, text) }
	dicfg := func(text string) op { return file("/etc/cloud/ds-identify.cfg", text) }
	seed := func(d string, files ...string) []op {
		var ops []op
		for _, f := range files {
			ops = append(ops, file("/var/lib/cloud/seed/"+d+"/"+f, "x: 1\n"))
		}
		return ops
	}
	const di = "/usr/lib/cloud-init/ds-identify"
	cs := map[string]ciCase{
		"single":             {ops: []op{cfg("99.cfg", "datasource_list: [ Ec2 ]\n")}, machine: "none"},
		"single-none":        {ops: []op{cfg("99.cfg", "datasource_list: [ Ec2, None ]\n")}, machine: "none"},
		"only-none":          {ops: []op{cfg("99.cfg", "datasource_list: [ None ]\n")}, machine: "none"},
		"two-elsewhere":      {ops: []op{cfg("99.cfg", "datasource_list: [ GCE, Azure ]\n")}, machine: "Ec2"},
		"two-here":           {ops: []op{cfg("99.cfg", "datasource_list: [ GCE, Azure ]\n")}, machine: "GCE"},
		"unspaced":           {ops: []op{cfg("99.cfg", "datasource_list: [GCE,Ec2,None]\n")}, machine: "Ec2"},
		"quoted":             {ops: []op{cfg("99.cfg", "datasource_list: [ 'Ec2', \"GCE\" ]\n")}, machine: "GCE"},
		"block-list":         {ops: []op{cfg("99.cfg", "datasource_list:\n  - Oracle\n  - GCE\n")}, machine: "Oracle"},
		"block-list-none":    {ops: []op{cfg("99.cfg", "datasource_list:\n  - Ec2\n")}, machine: "none"},
		"commented":          {ops: []op{cfg("99.cfg", "# datasource_list: [ Ec2 ]\n")}, machine: "none"},
		"indented":           {ops: []op{cfg("99.cfg", "system_info:\n  datasource_list: [ Azure ]\n")}, machine: "none"},
		"no-newline":         {ops: []op{cfg("99.cfg", "datasource_list: [ Azure ]")}, machine: "none"},
		"later-file-wins":    {ops: []op{cfg("50.cfg", "datasource_list: [ Ec2, GCE ]\n"), cfg("90.cfg", "datasource_list: [ Azure, GCE ]\n")}, machine: "Ec2"},
		"unknown-names":      {ops: []op{cfg("99.cfg", "datasource_list: [ Foo, Bar ]\n")}, machine: "Ec2"},
		"not-cfg":            {ops: []op{cfg("99.conf", "datasource_list: [ Ec2 ]\n")}, machine: "none"},
		"quoted-key":         {ops: []op{cfg("99.cfg", "\"datasource_list\" : [ Azure ]\n")}, machine: "none"},
		"escaped-colon":      {ops: []op{cfg("99.cfg", "datasource_list\\: [ Azure ]\n")}, machine: "none"},
		"longer-key":         {ops: []op{cfg("99.cfg", "my_datasource_list: [ Azure ]\n")}, machine: "none"},
		"trailing-comment":   {ops: []op{cfg("99.cfg", "datasource_list: [ Ec2, GCE ] # [ Azure ]\n")}, machine: "Azure"},
		"colon-in-name":      {ops: []op{cfg("a: b.cfg", "datasource_list:[Azure]\n")}, machine: "none"},
		"policy-notfound-en": {ops: []op{dicfg("policy: search,found=all,maybe=none,notfound=enabled\n")}, machine: "none"},
		"policy-disabled":    {ops: []op{dicfg("policy: disabled\n")}, machine: "Ec2"},
		"policy-enabled":     {ops: []op{dicfg("policy: enabled\n")}, machine: "none"},
		"policy-report":      {ops: []op{dicfg("policy: report\n")}, machine: "none"},
		"policy-bogus":       {ops: []op{dicfg("policy: bogus,notfound=maybe\n")}, machine: "none"},
		"dicfg-datasource":   {ops: []op{dicfg("datasource: Ec2\n")}, machine: "none"},
		"cmdline-ci-ds":      {cmdline: "ro ci.ds=GCE", machine: "none"},
		"cmdline-policy":     {cmdline: "ci.di.policy=enabled quiet", machine: "none"},
		"cmdline-policy-nf":  {cmdline: "ci.di.policy=search,found=first,maybe=all,notfound=enabled", machine: "none"},
		"cmdline-disabled":   {cmdline: "ro cloud-init=disabled", machine: "Ec2"},
		"cmdline-enabled-etc-disabled": {ops: []op{file("/etc/cloud/cloud-init.disabled", "")},
			cmdline: "cloud-init=enabled", machine: "Ec2"},
		"etc-disabled":    {ops: []op{file("/etc/cloud/cloud-init.disabled", "")}, machine: "Ec2"},
		"etc-enabled":     {ops: []op{file("/etc/cloud/cloud-init.enabled", "")}, machine: "none"},
		"cmdline-ds":      {cmdline: "ds=nocloud;s=http://10.0.0.1/", machine: "none"},
		"cmdline-cc":      {cmdline: "cc:{'datasource_list': ['Ec2']} end_cc", machine: "none"},
		"nocloud-seed":    {ops: seed("nocloud", "meta-data", "user-data"), machine: "none"},
		"nocloud-partial": {ops: seed("nocloud", "meta-data"), machine: "none"},
		"nocloud-net":     {ops: seed("nocloud-net", "meta-data", "user-data"), machine: "none"},
		"ec2-seed":        {ops: seed("ec2", "meta-data", "user-data"), machine: "none"},
		"azure-seed":      {ops: seed("azure", "ovf-env.xml"), machine: "none"},
		"configdrive-openstack": {ops: append(seed("config_drive/openstack/2012-08-10", "meta_data.json"),
			cfg("99.cfg", "datasource_list: [ OpenStack, Ec2 ]\n")), machine: "OpenStack"},
		"maas-config":      {ops: []op{cfg("90_maas.cfg", "datasource:\n  MAAS: {consumer_key: x}\n")}, machine: "none"},
		"nocloud-seedfrom": {ops: []op{cfg("90.cfg", "datasource:\n  NoCloud:\n    seedfrom: http://10.0.0.1/\n")}, machine: "none"},
		"manual-clean":     {ops: []op{file("/var/lib/cloud/instance/manual-clean", "")}, machine: "none"},
		"no-dsidentify":    {ops: []op{systemdtest.Remove(di)}, machine: "none"},
		"noexec-dsidentify": {ops: []op{file("/etc/cloud/cloud.cfg.d/99.cfg", "datasource_list: [ Ec2, GCE ]\n")},
			machine: "none"}, // ds-identify's mode is changed below
		// Ubuntu's 90_dpkg.cfg: every cloud, the machine decides.
		"dpkg-all-ec2":        {ops: []op{cfg("90_dpkg.cfg", "datasource_list: "+ubuntuDSList+"\n")}, machine: "Ec2"},
		"dpkg-all-none":       {ops: []op{cfg("90_dpkg.cfg", "datasource_list: "+ubuntuDSList+"\n")}, machine: "none"},
		"dpkg-all-arm64-none": {ops: []op{cfg("90_dpkg.cfg", "datasource_list: "+ubuntuDSList+"\n")}, machine: "none", arch: "arm64"},
		"arm64-none":          {machine: "none", arch: "arm64"},
		"arm64-ec2":           {machine: "Ec2", arch: "arm64"},
	}
	for m := range fakeMachines {
		cs["root-"+m] = ciCase{machine: m}
	}
	return cs
}

// ciRun is the script the oracle runs chrooted in the root (the case's
// tree at /mnt): the kernel command line and a virtual machine's
// systemd-detect-virt (and uname, for another architecture) shown to
// the generator and ds-identify (uname -snrvmo before 24.1, -svm since),
// the machine's DMI given through
// ds-identify's PATH_SYS_CLASS_DMI_ID, then the generator with its three
// directories.
const ciRun = `set -e
mount --bind /mnt/cmdline /proc/cmdline
mkdir -p /run/systemd /mnt/out/normal /mnt/out/early /mnt/out/late
export PATH=/mnt/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH_SYS_CLASS_DMI_ID=/mnt/dmi PATH_SYS_HYPERVISOR=/mnt/hypervisor PATH_DEV_DISK=/mnt/disk
set +e
/usr/lib/systemd/system-generators/cloud-init-generator /mnt/out/normal /mnt/out/early /mnt/out/late
echo "rc=$?"
cat /run/cloud-init/ds-identify.log 2>/dev/null | grep -v '^[A-Z_0-9]*=' | tail -5
`

const fakeDetectVirt = `#!/bin/sh
case "$*" in *--container*|*-c*) echo none; exit 1;; esac
echo kvm
`

const fakeUnameArm64 = `#!/bin/sh
case "$1" in
-snrvmo) echo "Linux cloud 6.12.0 #1 SMP Debian aarch64 GNU/Linux";;
-svm) echo "Linux #1 SMP Debian aarch64";;
-m) echo aarch64;;
*) exec /usr/bin/uname "$@";;
esac
`

// ciOracle runs the root's cloud-init-generator (and its ds-identify)
// on the case and returns the early link's target, "" when none.
func ciOracle(t *testing.T, sd systemdtest.Systemd, upper string, c ciCase) (string, string) {
	tree := t.TempDir()
	entries := []systemdtest.Entry{
		systemdtest.File("/cmdline", c.cmdline+"\n"),
		systemdtest.Exe("/bin/systemd-detect-virt", fakeDetectVirt),
		systemdtest.File("/disk/.keep", ""),
	}
	if c.arch == "arm64" {
		entries = append(entries, systemdtest.Exe("/bin/uname", fakeUnameArm64))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "dmi"), 0o755))
	for k, v := range fakeMachines[c.machine] {
		entries = append(entries, systemdtest.File("/dmi/"+k, v+"\n"))
	}
	systemdtest.Write(t, tree, entries...)
	out := sd.RunOver(t, upper, tree, "sh", "-c", ciRun)
	log := string(out.Stdout) + string(out.Stderr)
	require.NoError(t, out.Err, "%s", log)
	target, err := os.Readlink(filepath.Join(tree, "out/early/multi-user.target.wants/cloud-init.target"))
	if err != nil {
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	entries2, _ := os.ReadDir(filepath.Join(tree, "out/normal"))
	require.Empty(t, entries2, "the generator writes only the early directory")
	return target, log
}

// TestOracleCloudInit compares the early link cloud-init-generator
// writes, run with its ds-identify on fake machines, with the model's.
func TestOracleCloudInit(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		cases := ciCases()
		names := make([]string, 0, len(cases))
		for n := range cases {
			names = append(names, n)
		}
		sort.Strings(names)
		wrong := 0
		for _, name := range names {
			c := cases[name]
			ok := t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				ops := c.ops
				if name == "noexec-dsidentify" {
					data, err := os.ReadFile(filepath.Join(sd.Path(t), "usr/lib/cloud-init/ds-identify"))
					require.NoError(t, err)
					ops = append(ops, file("/usr/lib/cloud-init/ds-identify", string(data)))
				}
				upper := sd.Upper(t, ops)
				want, log := ciOracle(t, sd, upper, c)
				m := Machine{Datasource: c.machine}
				if c.arch != "" {
					m.Architecture = c.arch
				}
				gen := runGenerators(sd.View(t, upper), sd.Version, c.cmdline, m)
				got := ""
				if n, ok := gen.nodes[genDirEarly+"/multi-user.target.wants/cloud-init.target"]; ok {
					got = n.target
				}
				t.Logf("%s on %s: generator links %q, the model %q\n%s", name, c.machine, want, got, log)
				assert.Equal(t, want, got)
				if c.machine != "none" && strings.HasPrefix(name, "root-") {
					// The default assumption: the machine offers one of
					// the list, as each of these machines does.
					gen := runGenerators(sd.View(t, upper), sd.Version, c.cmdline, Machine{})
					_, ok := gen.nodes[genDirEarly+"/multi-user.target.wants/cloud-init.target"]
					assert.Equal(t, want != "", ok, "default assumption")
				}
			})
			if !ok {
				wrong++
			}
		}
		t.Logf("cloud-init %d cases on systemd %d: the model differs in %d", len(names), sd.Version, wrong)
	}
}

// TestCloudInitChain: on the Debian roots cloud-init's services start by
// the early link, whose chain edge says what the model assumed of the
// machine; with --assume datasource=none they do not start, and on an
// arm64 machine 22.4's default policy enables cloud-init anyway.
func TestCloudInitChain(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		fsys := sd.View(t, "")
		starts := func(m Machine) (bool, []unit.Edge) {
			g, err := LoadWith(fsys, sd.Version, Options{Machine: m})
			require.NoError(t, err)
			b := g.Boot()
			require.NoError(t, b.Err)
			return b.StartsAtBoot("cloud-final.service"), b.Chain("cloud-final.service")
		}
		ok, chain := starts(Machine{})
		require.True(t, ok, "systemd %d", sd.Version)
		assumed := ""
		for _, e := range chain {
			if e.To == "cloud-init.target" {
				assert.Equal(t, "/run/systemd/generator.early/multi-user.target.wants/cloud-init.target", e.Source)
				assumed = e.Assumes
			}
		}
		assert.Contains(t, assumed, "--assume datasource=")
		ok, chain = starts(Machine{Datasource: "Ec2"})
		assert.True(t, ok)
		assert.Contains(t, fmt.Sprint(chain), "datasource Ec2")
		ok, _ = starts(Machine{Datasource: "none"})
		assert.False(t, ok)
		ok, _ = starts(Machine{Datasource: "none", Architecture: "arm64"})
		assert.Equal(t, sd.Version == 252, ok, "notfound=enabled without DMI in 22.4 only")
	}
}

// TestCloudInitReaders pins the readers on inputs the oracle does not
// reach: read's backslashes and blanks, the policy parser, the script
// default extractor, grep's key match.
func TestCloudInitReaders(t *testing.T) {
	assert.Equal(t, []string{"a b", `x\`, "c d   e"}, shReadLines([]byte("  a b \t\n"+`x\\`+"\n"+`c\`+"\n"+` d \ \ e`+"\nlast")))
	assert.Equal(t, "ro quiet", shReadFirst(" ro quiet \nsecond"))
	def := parsePolicy("search,found=all,maybe=none,notfound=disabled", diPolicy{})
	assert.Equal(t, diPolicy{"search", "all", "none", "disabled"}, def)
	assert.Equal(t, diPolicy{"report", "first", "none", "disabled"}, parsePolicy("report,found=first,maybe=x,notfound=", def))
	assert.Equal(t, diPolicy{"search", "all", "all", "enabled"}, parsePolicy(" enabled,maybe=all,notfound=enabled", def))
	assert.Equal(t, diPolicy{}, parsePolicy("found=x", diPolicy{}))
	assert.Equal(t, "search,found=all,maybe=none,notfound=disabled",
		shDefault("x\nDI_DEFAULT_POLICY=\"search,found=all,maybe=none,notfound=${DI_DISABLED}\"\n", "DI_DEFAULT_POLICY"))
	assert.Equal(t, "A B C", shDefault("\nL=\"A B \\\nC\"\n", "L"))
	for _, s := range []string{"\nL=\"$X\"\n", "\nL=\"a\"\nL=\"b\"\n", "\nL=\"open\n", "\nL=\"`x`\"\n", "  L=\"x\"\n"} {
		assert.Empty(t, shDefault(s, "L"), "%q", s)
	}
	assert.Equal(t, "/lib/systemd/system/cloud-init.target", shAssign([]byte("x\nCLOUD_SYSTEM_TARGET=\"/lib/systemd/system/cloud-init.target\"\n"), "CLOUD_SYSTEM_TARGET"))
	assert.Empty(t, shAssign([]byte("d=\"/a\"\n  d=\"/b\"\n"), "d"))
	for line, want := range map[string]bool{
		"datasource_list: [a]": true, `"datasource_list" : x`: true, "x datasource_list\t:": true,
		"datasource_list [a]": false, "datasource_lis: x": false, "datasource_list": false,
	} {
		assert.Equal(t, want, grepKey(line, "datasource_list", false), "%q", line)
	}
	for line, want := range map[string]bool{
		"datasource_list: [a]": true, `"datasource_list": x`: true, `"datasource_list" : x`: false,
		"datasource_list\\: x": false, `datasource_list"": x`: false, "x datasource_list\t:": false,
	} {
		assert.Equal(t, want, grepKey(line, "datasource_list", true), "23.4 %q", line)
	}
	old, cur := dsIdentify{}, dsIdentify{trimEnds: true}
	assert.Equal(t, "Ec2 None ", old.parseYAMLArray("[ 'Ec2' ,None, ]"))
	assert.Equal(t, "a b", old.parseYAMLArray("[ a  b ]"))
	assert.Equal(t, "a  b", cur.parseYAMLArray("[ a  b ]"))
	assert.Equal(t, " x", old.parseYAMLArray(",x"))
	assert.Equal(t, "", old.parseYAMLArray("[]"))
	assert.Equal(t, "disabled", ciKernelCmdline("cloud-init=enabled ro cloud-init=disabled"))
	assert.Equal(t, "", ciKernelCmdline("xcloud-init=disabled"))
}

// TestCloudInitRefuses: a generator or ds-identify the port does not know
// writes nothing, as do defaults it cannot read and an environment file
// ds-identify would source.
func TestCloudInitRefuses(t *testing.T) {
	sd := systemdtest.Trixie
	root := sd.Path(t)
	gen, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system-generators/cloud-init-generator"))
	require.NoError(t, err)
	di, err := os.ReadFile(filepath.Join(root, "usr/lib/cloud-init/ds-identify"))
	require.NoError(t, err)
	links := func(ops ...op) bool {
		out := runGenerators(sd.View(t, sd.Upper(t, ops)), sd.Version, "", Machine{})
		_, ok := out.nodes[genDirEarly+"/multi-user.target.wants/cloud-init.target"]
		return ok
	}
	require.True(t, links())
	const g = "/usr/lib/systemd/system-generators/cloud-init-generator"
	const d = "/usr/lib/cloud-init/ds-identify"
	assert.False(t, links(exe(g, strings.Replace(string(gen), `CLOUD_SYSTEM_TARGET="`, `CLOUD_SYSTEM_TARGET="$X`, 1))))
	assert.False(t, links(exe(g, "#!/bin/sh\nexit 0\n")))
	assert.False(t, links(exe(d, strings.Replace(string(di), "\nDI_DSLIST_DEFAULT=", "\nDI_DSLIST_DEFAULT=$X\nX=", 1))))
	assert.False(t, links(exe(d, strings.Replace(string(di), "\nDI_DEFAULT_POLICY=\"", "\nDI_DEFAULT_POLICY=\"$Y", 1))))
	assert.False(t, links(file("/usr/libexec/ds-identify-env", "DI_MODE=disabled\n")))
	// A check_config grep of neither 23.4's nor 24.2's pattern.
	assert.False(t, links(exe(d, strings.Replace(string(di), `out=$(grep "$key[\"\']*[[:space:]]*:"`, `out=$(grep -i "$key[\"\']*[[:space:]]*:"`, 1))))
	// Fedora's and RHEL's template names ds-identify in /usr/libexec.
	rhel := strings.Replace(string(gen), `dsidentify="/usr/lib/cloud-init/ds-identify"`, `dsidentify="/usr/libexec/cloud-init/ds-identify"`, 1)
	assert.True(t, links(exe(g, rhel), exe("/usr/libexec/cloud-init/ds-identify", string(di))))
	assert.False(t, links(exe(g, rhel)), "25.x runs a missing ds-identify: 127")
	// A distribution's patched default list is honoured.
	patched := strings.Replace(string(di), "\nDI_DSLIST_DEFAULT=\"", "\nDI_DSLIST_DEFAULT=\"Foo Bar \\\n", 1)
	patched = patched[:strings.Index(patched, "\nDI_DSLIST_DEFAULT=")] + "\nDI_DSLIST_DEFAULT=\"Foo Bar\"\nDI_DSLIST_UNUSED=\"" +
		patched[strings.Index(patched, "\nDI_DSLIST_DEFAULT=")+len("\nDI_DSLIST_DEFAULT=\"Foo Bar \\\n"):]
	assert.False(t, links(exe(d, patched)), "no datasource of Foo Bar has a check")
}

// TestCloudInitReadersDash runs the shell functions the readers port
// (while read, parse_yaml_array with either trim, unquote) in dash, the
// /bin/sh of Debian, on hostile inputs and compares.
func TestCloudInitReadersDash(t *testing.T) {
	dash := testenv.Tool(t, "dash", "dash")
	const funcs = `set -f
unquote() { local quote='"' tick="'"; local val="$1"; case "$val" in ${quote}*${quote}|${tick}*${tick}) val=${val#?}; val=${val%?};; esac; _RET="$val"; }
trim22() { set -- $*; _RET="$*"; }
trim25() { local tmp="" cur="$*"; until tmp="${cur#[[:space:]]}"; [ "$tmp" = "$cur" ]; do cur="$tmp"; done; until tmp="${cur%[[:space:]]}"; [ "$tmp" = "$cur" ]; do cur="$tmp"; done; _RET="$tmp"; }
pya() { local fn="$1" val="$2" oifs="$IFS" ret="" tok=""; val=${val#"["}; val=${val%"]"}; { IFS=","; set -- $val; IFS="$oifs"; }; for tok in "$@"; do $fn "$tok"; unquote "$_RET"; ret="${ret} $_RET"; done; _RET="${ret# }"; }
pya trim22 "$1"; printf '%s\n' "$_RET"
pya trim25 "$1"; printf '%s\n' "$_RET"
printf '%s' "$1" | while read line; do printf '<%s>' "$line"; done`
	for _, in := range []string{
		"[ 'Ec2' ,None, ]", "[ a \t b ]", ",x,", "[]", "[", "a,,b", `"a", 'b`, `''`, `"`, " [a] ",
		"  a b \t\nx\\\\\nc\\\n d \\ \\ e\nlast", "\\", "a\\\n", "\t\n\n x #y\n", "[ \"Ec2\",\t'GCE' ]\n",
	} {
		out, err := exec.Command(dash, "-c", funcs, "sh", in).Output()
		require.NoError(t, err, "%q", in)
		got := strings.Join([]string{dsIdentify{}.parseYAMLArray(in), dsIdentify{trimEnds: true}.parseYAMLArray(in), ""}, "\n")
		for _, l := range shReadLines([]byte(in)) {
			got += "<" + l + ">"
		}
		assert.Equal(t, string(out), got, "%q", in)
	}
}
