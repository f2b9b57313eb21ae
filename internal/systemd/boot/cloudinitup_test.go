package boot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// cloudInitScriptsEnv names a directory of upstream cloud-init's scripts
// for TestOracleCloudInitUpstream: one directory per release and
// variant (23.1-ubuntu, 25.2-debian, ...), each holding that tag's
// tools/ds-identify and its systemd/cloud-init-generator.tmpl rendered
// for the variant as cloud-init's tools/render-template renders it
// (Ubuntu ships both unpatched). The scripts are not part of this
// repository, so that test is built only with the cloudinit_upstream
// tag (go test -tags cloudinit_upstream -run TestOracleCloudInitUpstream),
// never in make test; the fuzz seeds read them too when it is set.
const cloudInitScriptsEnv = "AMILINT_CLOUDINIT_SCRIPTS"

// ciVariants are ds-identify scripts of other cloud-init releases made
// from the trixie root's (25.1) by the edits that tell them apart where
// the port reads them, and the cases that show it: 23.4's check_config
// grep, 25.2's dscheck_MAAS without the configuration check, the
// defaults of upstream 23.x-25.1 (Ubuntu's; Debian's patch sets
// maybe=none and notfound=disabled without DMI), and 26.2's
// reformatting. TestOracleCloudInitUpstream runs the releases' own
// scripts.
func ciVariants() map[string]struct {
	edit  func(string) string
	cases []string
} {
	repl := func(pairs ...string) func(string) string {
		return func(s string) string {
			for i := 0; i < len(pairs); i += 2 {
				if !strings.Contains(s, pairs[i]) {
					panic("ds-identify lacks " + pairs[i])
				}
				s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
			}
			return s
		}
	}
	return map[string]struct {
		edit  func(string) string
		cases []string
	}{
		"grep-23.4": {repl(`out=$(grep "$key[\"\']*[[:space:]]*:"`, `out=$(grep "$key\"\?:"`),
			[]string{"quoted-key", "escaped-colon", "single", "trailing-comment", "colon-in-name", "nocloud-seedfrom"}},
		"maas-25.2": {repl("    # check config files written by maas for installed system.\n    if check_config \"MAAS\"; then\n        return \"${DS_FOUND}\"\n    fi\n", ""),
			[]string{"maas-config", "root-none"}},
		"upstream-policy": {repl(`maybe=none,notfound=${DI_DISABLED}"`+"\nDI_DEFAULT_POLICY_NO_DMI=\"search,found=all,maybe=none,notfound=${DI_DISABLED}\"",
			`maybe=all,notfound=${DI_DISABLED}"`+"\nDI_DEFAULT_POLICY_NO_DMI=\"search,found=all,maybe=all,notfound=${DI_ENABLED}\""),
			[]string{"arm64-none", "arm64-ec2", "root-none", "root-Ec2", "two-elsewhere"}},
		"reformatted-26.2": {repl(";;", " ;;", "i?86|x86_64)", "i?86 | x86_64)",
			`until tmp="${cur#[[:space:]]}"; [ "$tmp" = "$cur" ]; do`, "until\n        tmp=\"${cur#[[:space:]]}\"\n        [ \"$tmp\" = \"$cur\" ]\n    do"),
			[]string{"root-none", "root-Ec2", "cmdline-ds", "quoted", "unspaced", "arm64-none", "dicfg-datasource"}},
	}
}

// TestOracleCloudInitVariants runs the variants of ciVariants with
// trixie's generator on their cases, and the model.
func TestOracleCloudInitVariants(t *testing.T) {
	sd := systemdtest.Trixie
	const d = "/usr/lib/cloud-init/ds-identify"
	orig, err := os.ReadFile(filepath.Join(sd.Path(t), d))
	require.NoError(t, err)
	cases := ciCases()
	for vname, v := range ciVariants() {
		di := v.edit(string(orig))
		for _, name := range v.cases {
			c, ok := cases[name]
			require.True(t, ok, name)
			t.Run(vname+"/"+name, func(t *testing.T) {
				upper := sd.Upper(t, append([]op{exe(d, di)}, c.ops...))
				want, log := ciOracle(t, sd, upper, c)
				out := runGenerators(sd.View(t, upper), sd.Version, c.cmdline, Machine{Datasource: c.machine, Architecture: c.arch})
				got := ""
				if n, ok := out.nodes[genDirEarly+"/multi-user.target.wants/cloud-init.target"]; ok {
					got = n.target
				}
				assert.Equal(t, want, got, "%s on %s\n%s", name, c.machine, log)
			})
		}
	}
}
