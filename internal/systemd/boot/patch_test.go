package boot

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// imageModprobeCases are units with and without a disk image under a
// device policy, keyed by name: systemd (unit_patch_contexts) makes those
// with both Want modprobe@loop, modprobe@dm_mod and modprobe@dm_verity.
// Each case spells its settings; what systemd makes of them is the oracle's
// to say.
func imageModprobeCases() map[string]string {
	const svc = "[Service]\nExecStart=/bin/true\n"
	const img = "RootImage=/srv/a.raw\n"
	const mi = "MountImages=/srv/b.raw:/mnt/b\n"
	const pd = "PrivateDevices=yes\n"
	cases := map[string]string{
		// RootImage= with each way to a device policy.
		"ri-pd":          svc + img + pd,
		"ri-closed":      svc + img + "DevicePolicy=closed\n",
		"ri-strict":      svc + img + "DevicePolicy=strict\n",
		"ri-auto":        svc + img + "DevicePolicy=auto\n",
		"ri-pd-auto":     svc + img + pd + "DevicePolicy=auto\n",
		"ri-policy-bad":  svc + img + "DevicePolicy=bogus\n",
		"ri-policy-keep": svc + img + "DevicePolicy=closed\nDevicePolicy=\n",
		"ri-pd-bad":      svc + img + "PrivateDevices=maybe\n",
		"ri-pd-keep":     svc + img + pd + "PrivateDevices=\n",
		"ri-pd-no":       svc + img + pd + "PrivateDevices=no\n",
		"ri-only":        svc + img,
		"pd-only":        svc + pd,
		"ri-reset":       svc + img + "RootImage=\n" + pd,
		"ri-spec":        svc + "RootImage=/srv/%n.raw\n" + pd,
		// DeviceAllow= entries systemd keeps or ignores.
		"allow-null":     svc + img + "DeviceAllow=/dev/null rw\n",
		"allow-norights": svc + img + "DeviceAllow=/dev/null\n",
		"allow-block":    svc + img + "DeviceAllow=block-loop\n",
		"allow-char":     svc + img + "DeviceAllow=char-rtc r\n",
		"allow-inacc":    svc + img + "DeviceAllow=/run/systemd/inaccessible/chr\n",
		"allow-dev":      svc + img + "DeviceAllow=/dev\n",
		"allow-devslash": svc + img + "DeviceAllow=/dev/\n",
		"allow-dotdot":   svc + img + "DeviceAllow=/dev/../etc/x\n",
		"allow-tmp":      svc + img + "DeviceAllow=/tmp/x\n",
		"allow-rel":      svc + img + "DeviceAllow=dev/null\n",
		"allow-rights":   svc + img + "DeviceAllow=/dev/null rx\n",
		"allow-spaced":   svc + img + "DeviceAllow=/dev/null r w\n",
		"allow-spec":     svc + img + "DeviceAllow=/dev/%X\n",
		"allow-quoted":   svc + img + "DeviceAllow=\"/dev/null\" rwm\n",
		"allow-unbal":    svc + img + "DeviceAllow=\"/dev/null rw\n",
		"allow-reset":    svc + img + "DeviceAllow=/dev/null\nDeviceAllow=\n",
		"allow-again":    svc + img + "DeviceAllow=/dev/null\nDeviceAllow=\nDeviceAllow=char-rtc\n",
		"allow-noimage":  svc + "DeviceAllow=/dev/null\n",
		// MountImages=.
		"mi-pd":       svc + mi + pd,
		"mi-opts":     svc + "MountImages=/srv/b.raw:/mnt/b:root:ro\n" + pd,
		"mi-perm":     svc + "MountImages=-/srv/b.raw:/mnt/b\nDevicePolicy=closed\n",
		"mi-second":   svc + "MountImages=bad /srv/b.raw:/mnt/b\n" + pd,
		"mi-colon":    svc + "MountImages=/srv/b\\:c.raw:/mnt/b\n" + pd,
		"mi-nodest":   svc + "MountImages=/srv/b.raw\n" + pd,
		"mi-emptyd":   svc + "MountImages=/srv/b.raw:\n" + pd,
		"mi-rel":      svc + "MountImages=b.raw:/mnt/b\n" + pd,
		"mi-reldst":   svc + "MountImages=/srv/b.raw:mnt/b\n" + pd,
		"mi-reset":    svc + mi + "MountImages=\n" + pd,
		"mi-proc":     svc + "MountImages=/proc/b.raw:/mnt/b\n" + pd,
		"mi-sysdst":   svc + "MountImages=/srv/b.raw:/sys/b\n" + pd,
		"mi-dev":      svc + "MountImages=/dev/vdb:/mnt/b\n" + pd,
		"mi-unbal":    svc + "MountImages=\"/srv/b.raw:/mnt/b\n" + pd,
		"mi-spec":     svc + "MountImages=/srv/%X:/mnt/b\n" + pd,
		"mi-coalesce": svc + "MountImages=/srv/b.raw::/mnt/b\n" + pd,
		"mi-lead":     svc + "MountImages=:/srv/b.raw:/mnt/b\n" + pd,
		"mi-badesc":   svc + "MountImages=/srv/b\\q.raw:/mnt/b /srv/c.raw:/mnt/c\n" + pd,
		"mi-badopt":   svc + "MountImages=/srv/b.raw:/mnt/b:root:\\q\n" + pd,
		"mi-hexesc":   svc + "MountImages=/srv/b\\x41.raw:/mnt/b\n" + pd,
		"mi-quoted":   svc + "MountImages=\"/srv/b c.raw:/mnt/b\"\n" + pd,
		"mi-trailbs":  svc + "MountImages=/srv/b.raw:/mnt/b\\\n" + pd,
		"mi-only":     svc + mi,
		"mi-both":     svc + mi + img + "DeviceAllow=char-rtc\n",
		"ri-dropin":   svc + pd, // RootImage= comes from its drop-in
		"ri-dropin0":  svc + img + pd,
	}
	return cases
}

// TestOracleImageModprobes compares, unit by unit, the modules systemd
// 252 and 257 make a unit Want for its disk image with the model's, for
// services, sockets (which need no command for it), mounts and swaps; and
// the whole boot set with them.
func TestOracleImageModprobes(t *testing.T) {
	var ops []op
	enable := func(name, wants, text string) {
		ops = append(ops, file("/etc/systemd/system/"+name, text), link("/etc/systemd/system/"+wants+"/"+name, "/etc/systemd/system/"+name))
	}
	var names []string
	for k, text := range imageModprobeCases() {
		name := "img-" + k + ".service"
		names = append(names, name)
		enable(name, "multi-user.target.wants", text)
	}
	ops = append(ops,
		file("/etc/systemd/system/img-ri-dropin.service.d/image.conf", "[Service]\nRootImage=/srv/c.raw\n"),
		file("/etc/systemd/system/img-ri-dropin0.service.d/image.conf", "[Service]\nRootImage=\n"))
	for _, c := range []struct{ name, wants, text string }{
		{"imgsock-pd.socket", "sockets.target.wants", "[Socket]\nListenStream=/run/imgsock-pd.sock\nRootImage=/srv/a.raw\nPrivateDevices=yes\n"},
		{"imgsock-none.socket", "sockets.target.wants", "[Socket]\nListenStream=/run/imgsock-none.sock\nRootImage=/srv/a.raw\n"},
		{"srv-imgm1.mount", "local-fs.target.wants", "[Mount]\nWhat=tmpfs\nWhere=/srv/imgm1\nType=tmpfs\nRootImage=/srv/a.raw\nDevicePolicy=strict\n"},
		{"srv-imgm2.mount", "local-fs.target.wants", "[Mount]\nWhat=tmpfs\nWhere=/srv/imgm2\nType=tmpfs\nPrivateDevices=yes\n"},
		{"imgswap1.swap", "swap.target.wants", "[Swap]\nWhat=/imgswap1\nMountImages=/srv/b.raw:/mnt/b\nDeviceAllow=/dev/loop-control\n"},
	} {
		names = append(names, c.name)
		enable(c.name, c.wants, c.text)
		if unitType := c.name[len(c.name)-6:]; unitType == "socket" {
			ops = append(ops, file("/etc/systemd/system/"+c.name[:len(c.name)-7]+".service", svc))
		}
	}
	sort.Strings(names)
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			v := newVariant(t, sd, ops)
			want := v.oracle(t)
			require.Empty(t, want.Failed)
			got, g := modelStart(t, v)
			wantOnly, gotOnly := diff(want.Start, got)
			assert.Empty(t, wantOnly, "systemd starts, the model does not")
			assert.Empty(t, gotOnly, "the model starts, systemd does not")
			with := 0
			for _, n := range names {
				var sys, model []string
				for _, w := range want.Wants[n] {
					if slices.Contains(imageModprobes, w) {
						sys = append(sys, w)
					}
				}
				u := g.Unit(n)
				require.NotNil(t, u, n)
				require.Equal(t, Loaded, u.State, "%s: %v", n, u.LoadError)
				for _, d := range u.Deps {
					if slices.Contains(imageModprobes, d.Name) && !slices.Contains(model, d.Name) {
						model = append(model, d.Name)
					}
				}
				sort.Strings(sys)
				sort.Strings(model)
				assert.Equal(t, sys, model, "%s: the modules it Wants", n)
				if len(sys) > 0 {
					with++
				}
			}
			// Both outcomes occur, or the cases test nothing.
			t.Logf("systemd %d: %d of %d units want the image modules", sd.Version, with, len(names))
			assert.Greater(t, with, 10, fmt.Sprintf("systemd %d", sd.Version))
			assert.Less(t, with, len(names)-10, fmt.Sprintf("systemd %d", sd.Version))
		})
	}
}

func TestColonWords(t *testing.T) {
	for in, want := range map[string][]string{
		"/a:/b":         {"/a", "/b"},
		"::/a::/b:":     {"/a", "/b"},
		`/a\:b:/c`:      {"/a:b", "/c"},
		`/a\\:b`:        {`/a\`, "b"},
		`/a\x41:/b\n`:   {"/aA", "/b\n"},
		"/a:/b:root:ro": {"/a", "/b", "root", "ro"},
		"":              nil,
		":::":           nil,
	} {
		got, err := colonWords(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{`/a\q:/b`, `/a:/b\`, `/a\x00:/b`} {
		_, err := colonWords(in)
		assert.Error(t, err, in)
	}
}

// FuzzMountImages runs config_parse_mount_images' word splitting and the
// image-policy check on any value: they never panic, and a value without
// backslashes or quotes splits into the colon-separated fields that are
// not empty.
func FuzzMountImages(f *testing.F) {
	for _, c := range imageModprobeCases() {
		f.Add(c)
	}
	f.Add(`/srv/b\:c.raw:/mnt/b:root:ro "/x y:/z"`)
	f.Fuzz(func(t *testing.T, v string) {
		for _, version := range []int{252, 257} {
			mountImagesKept(v, "x.service", version)
		}
		w, _, ok, err := unit.ExtractWord(v, true, true)
		if err != nil || !ok {
			return
		}
		got, err := colonWords(w)
		if strings.ContainsAny(v, "\\\"'") {
			return
		}
		require.NoError(t, err)
		var want []string
		for _, f := range strings.Split(w, ":") {
			if f != "" {
				want = append(want, f)
			}
		}
		require.Equal(t, want, got)
	})
}
