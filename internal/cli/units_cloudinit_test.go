package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// ubuntuDatasources is the datasource_list Ubuntu's cloud-init package
// writes to /etc/cloud/cloud.cfg.d/90_dpkg.cfg by default (its debconf
// template): every cloud, the machine decides.
const ubuntuDatasources = "[ NoCloud, ConfigDrive, OpenNebula, DigitalOcean, Azure, AltCloud, OVF, MAAS, GCE, OpenStack, " +
	"CloudSigma, SmartOS, Bigstep, Scaleway, AliYun, Ec2, CloudStack, Hetzner, IBMCloud, Oracle, Exoscale, RbxCloud, " +
	"UpCloud, VMware, Vultr, LXD, NWCS, Akamai, WSL, None ]"

// ubuntuCloudInit lays out cloud-init in the dlami fixture as Ubuntu
// 22.04 and 24.04 ship it (cloud-init 24.x to 26.x): cloud-init.target
// without [Install] and no link to it in /etc (the generator writes one
// each boot), the generator in /usr/lib/systemd/system-generators,
// ds-identify in /usr/lib/cloud-init, and 90_dpkg.cfg's datasource_list.
// gen and di are the scripts.
func ubuntuCloudInit(t *testing.T, gen, di []byte, list string) string {
	t.Helper()
	dir := materialize(t, "dlami")
	require.NoError(t, os.Remove(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/cloud-init.target")))
	write := func(p string, data []byte, mode os.FileMode) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), data, mode))
	}
	write("lib/systemd/system/cloud-init.target", []byte("[Unit]\nDescription=Cloud-init target\nAfter=multi-user.target\n"), 0o644)
	write("usr/lib/systemd/system-generators/cloud-init-generator", gen, 0o755)
	write("usr/lib/cloud-init/ds-identify", di, 0o755)
	write("etc/cloud/cloud.cfg", []byte("datasource_list: [ NoCloud, ConfigDrive, Ec2, None ]\n"), 0o644)
	write("etc/cloud/cloud.cfg.d/90_dpkg.cfg", []byte("# to update this file, run dpkg-reconfigure cloud-init\ndatasource_list: "+list+"\n"), 0o644)
	return dir
}

// ubuntuScripts are the cloud-init scripts the test lays out, by
// release: the trixie root's (25.1, whose generator is upstream's since
// 24.2) with ds-identify's default policy set back to upstream's, which
// Ubuntu keeps (Debian patches it); and, when AMILINT_CLOUDINIT_SCRIPTS
// names a directory of upstream's scripts, each of its *-ubuntu releases.
func ubuntuScripts(t *testing.T) map[string][2][]byte {
	root := systemdtest.Trixie.Root.Path(t)
	gen, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system-generators/cloud-init-generator"))
	require.NoError(t, err)
	di, err := os.ReadFile(filepath.Join(root, "usr/lib/cloud-init/ds-identify"))
	require.NoError(t, err)
	const debian = `DI_DEFAULT_POLICY="search,found=all,maybe=none,notfound=${DI_DISABLED}"` + "\n" +
		`DI_DEFAULT_POLICY_NO_DMI="search,found=all,maybe=none,notfound=${DI_DISABLED}"`
	const upstream = `DI_DEFAULT_POLICY="search,found=all,maybe=all,notfound=${DI_DISABLED}"` + "\n" +
		`DI_DEFAULT_POLICY_NO_DMI="search,found=all,maybe=all,notfound=${DI_ENABLED}"`
	require.Contains(t, string(di), debian)
	out := map[string][2][]byte{"25.1-upstream-policy": {gen, []byte(strings.Replace(string(di), debian, upstream, 1))}}
	if dir := os.Getenv("AMILINT_CLOUDINIT_SCRIPTS"); dir != "" {
		rels, err := filepath.Glob(filepath.Join(dir, "*-ubuntu"))
		require.NoError(t, err)
		for _, rel := range rels {
			gen, err := os.ReadFile(filepath.Join(rel, "cloud-init-generator"))
			require.NoError(t, err)
			di, err := os.ReadFile(filepath.Join(rel, "ds-identify"))
			require.NoError(t, err)
			out[filepath.Base(rel)] = [2][]byte{gen, di}
		}
	}
	return out
}

// TestUnitsUbuntuCloudInit: on an Ubuntu layout of cloud-init, `units -o
// json` shows its services starting through cloud-init.target, linked by
// the generator; with Ubuntu's list of every cloud the chain says what
// was assumed of the machine, and a machine offering none (or
// cloud-init.disabled) starts none; with [ Ec2, None ] ds-identify needs
// no machine.
func TestUnitsUbuntuCloudInit(t *testing.T) {
	const early = "/run/systemd/generator.early/multi-user.target.wants/cloud-init.target"
	type edge struct{ From, To, Source, Assumes string }
	type unitJSON struct {
		Name   string `json:"name"`
		Starts bool   `json:"starts_at_boot"`
		Chain  []edge `json:"chain"`
	}
	// cloudFinal is cloud-final.service's start and the assumes of its
	// chain's edge to cloud-init.target ("-" when there is none).
	cloudFinal := func(t *testing.T, dir string, args ...string) (bool, string) {
		code, out, errs := runUnitsCLI(append([]string{"units", dir, "-o", "json"}, args...)...)
		require.Equal(t, ExitOK, code, errs)
		var doc struct{ Units []unitJSON }
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		for _, u := range doc.Units {
			if u.Name != "cloud-final.service" {
				continue
			}
			for _, e := range u.Chain {
				if e.To == "cloud-init.target" {
					assert.Equal(t, early, e.Source)
					return u.Starts, e.Assumes
				}
			}
			return u.Starts, "-"
		}
		t.Fatalf("no cloud-final.service in %s", out)
		return false, ""
	}
	for rel, s := range ubuntuScripts(t) {
		t.Run(rel, func(t *testing.T) {
			all := ubuntuCloudInit(t, s[0], s[1], ubuntuDatasources)
			starts, assumes := cloudFinal(t, all)
			assert.True(t, starts)
			assert.Contains(t, assumes, "--assume datasource=NAME")
			starts, assumes = cloudFinal(t, all, "--assume", "datasource=Ec2")
			assert.True(t, starts)
			assert.Contains(t, assumes, "datasource Ec2")
			starts, _ = cloudFinal(t, all, "--assume", "datasource=none")
			assert.False(t, starts, "no datasource on the machine")
			ec2 := ubuntuCloudInit(t, s[0], s[1], "[ Ec2, None ]")
			starts, assumes = cloudFinal(t, ec2, "--assume", "datasource=none")
			assert.True(t, starts, "a single datasource is found on any machine")
			assert.Empty(t, assumes)
			require.NoError(t, os.WriteFile(filepath.Join(ec2, "etc/cloud/cloud-init.disabled"), nil, 0o644))
			starts, _ = cloudFinal(t, ec2)
			assert.False(t, starts, "cloud-init.disabled")
		})
	}
}
