package boot

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

// udevNodeScript prints, hex-encoded, fstab_node_to_udev_node of each
// hex-encoded line of its input.
const udevNodeScript = `import ctypes, glob, sys
lib = ctypes.CDLL(glob.glob('/usr/lib/*/systemd/libsystemd-shared-*.so')[0])
lib.fstab_node_to_udev_node.restype = ctypes.c_char_p
out = []
for line in open(sys.argv[1], 'rb'):
    r = lib.fstab_node_to_udev_node(ctypes.c_char_p(bytes.fromhex(line.strip().decode())))
    out.append('-' if r is None else 'v' + r.hex())
print('\n'.join(out))
`

func systemdUdevNodes(t *testing.T, sd systemdtest.Systemd, values []string) []string {
	t.Helper()
	// The roots' python3 comes with cloud-init (fixtures/debian/build.sh).
	require.FileExists(t, filepath.Join(sd.Path(t), "usr/bin/python3"), "systemd %d's root has no python3", sd.Version)
	tree := t.TempDir()
	var in strings.Builder
	for _, v := range values {
		fmt.Fprintf(&in, "%s\n", hex.EncodeToString([]byte(v)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(tree, "in"), []byte(in.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "udevnode.py"), []byte(udevNodeScript), 0o644))
	o := sd.Run(t, tree, "python3", systemdtest.Tree+"/udevnode.py", systemdtest.Tree+"/in")
	require.NoError(t, o.Err, "%s", o.Stderr)
	lines := strings.Split(strings.TrimSuffix(string(o.Stdout), "\n"), "\n")
	require.Len(t, lines, len(values))
	out := make([]string, len(lines))
	for i, l := range lines {
		require.True(t, strings.HasPrefix(l, "v"), "systemd returned NULL for %q", values[i])
		b, err := hex.DecodeString(l[1:])
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
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
