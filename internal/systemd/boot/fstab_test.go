package boot

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// udevNodeSeeds are What= values at the edges of fstab_node_to_udev_node.
var udevNodeSeeds = []string{
	"LABEL=x", "LABEL=", "LABEL=a b", `LABEL="q"`, "LABEL='q'", `LABEL="q'`, `LABEL="`, `LABEL=""`, `LABEL="""`,
	`LABEL=\`, `LABEL=a\x20b`, "LABEL=#+-.:=@_", "LABEL=/", "LABEL=d\u00fcn", "LABEL=\u20ac\U0001F600",
	"LABEL=\xef\xb7\x90", "LABEL=\xef\xbf\xbe", "LABEL=\xed\xa0\x80", "LABEL=\xc0\xaf", "LABEL=\xff", "LABEL=\xc3",
	"LABEL=\xf4\x90\x80\x80", "LABEL=\x01\x7f", "UUID=1234-ABCD", "PARTUUID=x", "PARTLABEL=x", "label=x",
	"LABEL", "UUID", "/dev/sda1", "", "LABEL=LABEL=x", " LABEL=x", "PARTUUID=\"a b\"",
}

// TestUdevNodeSystemd compares udevNode with fstab_node_to_udev_node of
// each root's libsystemd-shared, called through ctypes from its python3,
// on the seeds and random values of bytes, UTF-8 and quotes.
func TestUdevNodeSystemd(t *testing.T) {
	values := append([]string(nil), udevNodeSeeds...)
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		values = append(values, randomUdevNode(r))
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			got := systemdUdevNodes(t, sd, values)
			wrong := 0
			for i, v := range values {
				if m := udevNode(v); m != got[i] {
					if wrong < 30 {
						t.Errorf("systemd %d: %q: systemd %q, the model %q", sd.Version, v, got[i], m)
					}
					wrong++
				}
			}
			t.Logf("systemd %d: %d values, %d wrong", sd.Version, len(values), wrong)
		})
	}
}

// fstabScript calls the fstab helpers of the root's libsystemd-shared on
// each line of its input: "u HEX" prints fstab_node_to_udev_node of the
// value, hex-encoded; "o HEX HEX" fstab_filter_options' verdict (1 or 0)
// on whether the options name one of the NUL-separated names.
const fstabScript = `import ctypes, glob, sys
lib = ctypes.CDLL(glob.glob('/usr/lib/*/systemd/libsystemd-shared-*.so')[0])
lib.fstab_node_to_udev_node.restype = ctypes.c_char_p
out = []
for line in open(sys.argv[1], 'rb'):
    f = line.rstrip(b'\n').split(b' ')
    if f[0] == b'u':
        r = lib.fstab_node_to_udev_node(ctypes.c_char_p(bytes.fromhex(f[1].decode())))
        out.append('-' if r is None else 'v' + r.hex())
    else:
        names = bytes.fromhex(f[2].decode()) + b'\0\0'
        r = lib.fstab_filter_options(ctypes.c_char_p(bytes.fromhex(f[1].decode())), ctypes.c_char_p(names), None, None, None, None)
        out.append('v%d' % r)
print('\n'.join(out))
`

// systemdFstab runs fstabScript in sd's root on lines and returns its
// output, a line each.
func systemdFstab(t *testing.T, sd systemdtest.Systemd, lines []string) []string {
	t.Helper()
	// The roots' python3 comes with cloud-init (fixtures/debian/build.sh).
	require.FileExists(t, filepath.Join(sd.Path(t), "usr/bin/python3"), "systemd %d's root has no python3", sd.Version)
	tree := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tree, "in"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "fstab.py"), []byte(fstabScript), 0o644))
	o := sd.Run(t, tree, "python3", systemdtest.Tree+"/fstab.py", systemdtest.Tree+"/in")
	require.NoError(t, o.Err, "%s", o.Stderr)
	out := strings.Split(strings.TrimSuffix(string(o.Stdout), "\n"), "\n")
	require.Len(t, out, len(lines))
	for i, l := range out {
		require.True(t, strings.HasPrefix(l, "v"), "systemd returned NULL for %q", lines[i])
		out[i] = l[1:]
	}
	return out
}

func systemdUdevNodes(t *testing.T, sd systemdtest.Systemd, values []string) []string {
	t.Helper()
	lines := make([]string, len(values))
	for i, v := range values {
		lines[i] = "u " + hex.EncodeToString([]byte(v))
	}
	out := systemdFstab(t, sd, lines)
	for i, h := range out {
		b, err := hex.DecodeString(h)
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
}

// fstabNameSets are the option names the model tests for.
var fstabNameSets = [][]string{
	{"fd", "pgrp", "minproto", "maxproto", "direct", "indirect"}, {"bind", "rbind"}, {"loop"}, {"_netdev"},
}

// fstabOptionSeeds are option strings at the edges of fstab_test_option.
var fstabOptionSeeds = []string{
	"", "fd", "fd=3", "fd,", ",fd", "xfd", "fdx", `fd\,x`, `a\,fd`, `a\\,fd`, `a\\\,fd`, `a,\`, `\`, `fd\`,
	"bind", "rbind", "bind=1", "a,bind,b", "loop", `loop\,x`, "_netdev", `x-systemd.after=a\,_netdev`, "pgrp=",
	"minproto,maxproto", "direct", "indirect", ",,", "a,,fd",
}

// TestFstabTestOptionSystemd compares fstabTestOption with
// fstab_filter_options of each root's libsystemd-shared on the seeds and
// random option strings of names, commas, backslashes and values.
func TestFstabTestOptionSystemd(t *testing.T) {
	opts := append([]string(nil), fstabOptionSeeds...)
	r := rand.New(rand.NewPCG(5, 6))
	pieces := []string{",", `\`, "=", "x", "fd", "bind", "rbind", "loop", "_netdev", "direct", "pgrp", "1", " "}
	for range 5000 {
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		opts = append(opts, b.String())
	}
	var lines []string
	for _, o := range opts {
		for _, names := range fstabNameSets {
			lines = append(lines, "o "+hex.EncodeToString([]byte(o))+" "+hex.EncodeToString([]byte(strings.Join(names, "\x00"))))
		}
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			got := systemdFstab(t, sd, lines)
			wrong := 0
			for i, o := range opts {
				for j, names := range fstabNameSets {
					want := got[i*len(fstabNameSets)+j] == "1"
					if m := fstabTestOption(o, names...); m != want {
						if wrong < 30 {
							t.Errorf("systemd %d: %q names one of %v: systemd %v, the model %v", sd.Version, o, names, want, m)
						}
						wrong++
					}
				}
			}
			t.Logf("systemd %d: %d option strings, %d name sets, %d wrong", sd.Version, len(opts), len(fstabNameSets), wrong)
		})
	}
}

// FuzzFstabTestOption checks fstabTestOption against a second reading:
// the options split at unescaped commas, each word's name (before "=")
// compared whole.
func FuzzFstabTestOption(f *testing.F) {
	for _, s := range fstabOptionSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, opts string) {
		var words []string
		var w strings.Builder
		for i := 0; i < len(opts); i++ {
			switch {
			case opts[i] == ',':
				words = append(words, w.String())
				w.Reset()
			case opts[i] == '\\' && i+1 < len(opts):
				w.WriteByte(opts[i])
				w.WriteByte(opts[i+1])
				i++
			default:
				w.WriteByte(opts[i])
			}
		}
		words = append(words, w.String())
		for _, names := range fstabNameSets {
			want := false
			for _, word := range words {
				name, _, _ := strings.Cut(word, "=")
				want = want || slices.Contains(names, name)
			}
			assert.Equal(t, want, fstabTestOption(opts, names...), "%q %v", opts, names)
		}
	})
}

// udevNodePieces are what random values are made of.
var udevNodePieces = []string{
	"LABEL=", "UUID=", "PARTUUID=", "PARTLABEL=", "\"", "'", "\\", " ", "a", "Z", "0", "#", "+", "-", ".", ":",
	"=", "@", "_", "/", "%", ",", "*", "~", "\x01", "\x7f", "\t", "\u00fc", "\u20ac", "\U0001F600", "\xef\xb7\x90",
	"\xef\xbf\xbf", "\xed\xa0\x80", "\xc0\x80", "\xe0\x80\x80", "\xf4\x90\x80\x80", "\xff", "\xc3", "\x80", "\xf0\x9f",
}

func randomUdevNode(r *rand.Rand) string {
	var b strings.Builder
	if r.IntN(8) != 0 {
		b.WriteString([]string{"LABEL=", "UUID=", "PARTUUID=", "PARTLABEL="}[r.IntN(4)])
	}
	for range r.IntN(8) {
		b.WriteString(udevNodePieces[r.IntN(len(udevNodePieces))])
	}
	return b.String()
}

// FuzzUdevNode checks that udevNode leaves values without a tag alone
// and writes a tagged one as a /dev/disk/by-* link of one component made
// of kept bytes, valid UTF-8 and \xNN escapes only.
func FuzzUdevNode(f *testing.F) {
	for _, s := range udevNodeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := udevNode(v)
		tag, _, ok := strings.Cut(v, "=")
		switch tag {
		case "LABEL", "UUID", "PARTUUID", "PARTLABEL":
		default:
			ok = false
		}
		if !ok {
			assert.Equal(t, v, got)
			return
		}
		dir := "/dev/disk/by-" + strings.ToLower(tag) + "/"
		require.True(t, strings.HasPrefix(got, dir), got)
		enc := got[len(dir):]
		assert.True(t, utf8.ValidString(enc), "%q", enc)
		assert.NotContains(t, enc, "/")
		for i := 0; i < len(enc); i++ {
			if enc[i] == '\\' {
				require.Less(t, i+3, len(enc), "%q", enc)
				assert.Equal(t, byte('x'), enc[i+1], "%q", enc)
			}
		}
	})
}
