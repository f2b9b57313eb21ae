package unit

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// sockaddrSeeds are listen values at the edges of what the parsers keep.
var sockaddrSeeds = []string{
	"80", "0", "65535", "65536", "-1", "-0", "+80", "0x50", "0X50", "0x", "010", "08", "0b1010000", "0B1", "0o120",
	"0b", "0o", "+0b1", "0b0b1", "0b-1", "0b 1", "0b -0", "\v80", "\f80", " 80", "80 ", "80x", "4294967376",
	"18446744073709551696", "1.2.3.4:80", "1.2.3.4.5:80", "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4", "01.2.3.4:80",
	"1.2.3:80", "256.1.1.1:80", "1.2.3.4:", "1.2.3.4: 80", "1.2.3.4:\v80", ":80", "localhost:80", "*:80",
	"127.0.0.1:80#x", "127.0.0.1:80%lo", "127.0.0.1:80%1", "127.0.0.1:80%", "127.0.0.1:80%all", "127.0.0.1:80%eth99",
	"[::1]:80", "[::1]", "::1", "[::]:80", "[::ffff:1.2.3.4]:80", "[::ffff:01.2.3.4]:80", "[1.2.3.4]:80", "[]:80",
	"[:]:80", "[::1]:80%lo", "[::1]:80%1", "[::1]:80%99999", "[::1]:80% 1", "[::1]:80%+1", "[::1]:80%0x1",
	"[::1]:80%-1", "[::1]:80%0", "[::1]:80%lo0", "[1::2::3]:80", "[1:2:3:4:5:6:7::8]:80", "[1:2:3:4:5:6:7::]:80",
	"[::1:2:3:4:5:6:7]:80", "[1:2:3:4:5:6:7:8]:80", "[1:2:3:4:5:6:1.2.3.4]:80", "[1:2:3:4:5:6:7:1.2.3.4]:80",
	"[12345::]:80", "[1:]:80", "[:1]:80", "[::1]]:80", "[[::1]:80", "[::1]x:80", "1:2:3:4:5:6:7:8", "[fe80::1%lo]:80",
	"vsock::80", "vsock:2:80", "vsock:x:1", "vsock:1", "vsock:2:", "vsock:host:80", "vsock:local:1", "vsock:hypervisor:1",
	"vsock-stream::80", "vsock-dgram:2:80", "vsock-seqpacket::1", "vsock:2:4294967295", "vsock:2:4294967296",
	"vsock:-1:80", "vsock::0", "vsock::-0", "vsock:0x2:0o1", "vsock: 2:1", "vsock:2: 1", "vsock:2:1:2", "vsock",
	"vsock-foo::1", "@", "@x", "/", "/x", "/" + strings.Repeat("a", 106), "/" + strings.Repeat("a", 107),
	"@" + strings.Repeat("a", 106), "@" + strings.Repeat("a", 107), "run/x", "", " ", "\\", "%lo",
}

// netlinkSeeds are ListenNetlink= values at the edges.
var netlinkSeeds = []string{
	"route", "audit", "kobject-uevent 1", "kobject-uevent x", "nosuchfamily", "Route", "99", "0", "2147483647",
	"2147483648", "-1", "route -1", "route -0", "route 0x10", "route 1 2", "route 4294967295", "route 4294967296",
	"rou\\te", "route\\", "route\\ 1", "\"route\"", "route  1", "route\t1", "route \v1", "0b1", "+0b1", "0x7fffffff",
	"", " ", "generic 0b0b1", "rdma +1", "ecryptfs\v", "scsitransport 1\v",
}

// TestSocketAddressSystemd compares ParseSocketAddress and
// ParseNetlinkAddress with systemd's own socket_address_parse_and_warn
// and socket_address_parse_netlink, called through ctypes from each
// root's libsystemd-shared (its python3), on the seeds and random
// values built from their pieces.
func TestSocketAddressSystemd(t *testing.T) {
	n := 20000
	if s := os.Getenv("AMILINT_SOCKADDR_CASES"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	values := append([]string(nil), sockaddrSeeds...)
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		values = append(values, randomSockaddr(r))
	}
	nl := append([]string(nil), netlinkSeeds...)
	for range n / 4 {
		nl = append(nl, randomNetlink(r))
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			got := systemdSockaddr(t, sd, values, nl)
			wrong := 0
			for i, v := range values {
				if hostLink(sd.Version, v) {
					continue
				}
				fam, ok := ParseSocketAddress(sd.Version, v)
				model := "refused"
				if ok {
					model = fmt.Sprint(fam)
				}
				if model != got[i] && wrong < 30 {
					t.Errorf("systemd %d: %q: systemd %s, the model %s", sd.Version, v, got[i], model)
				}
				if model != got[i] {
					wrong++
				}
			}
			for i, v := range nl {
				want := got[len(values)+i] != "refused"
				if ParseNetlinkAddress(sd.Version, v) != want {
					if wrong < 30 {
						t.Errorf("systemd %d: netlink %q: systemd keeps it: %v", sd.Version, v, want)
					}
					wrong++
				}
			}
			t.Logf("systemd %d: %d socket and %d netlink addresses, %d wrong", sd.Version, len(values), len(nl), wrong)
		})
	}
}

// hostLink reports whether v's scope names a link of this machine other
// than the loopback: systemd resolves it here, the model assumes the link
// is not there at boot.
func hostLink(version int, v string) bool {
	_, scope, ok := strings.Cut(v, "%")
	if !ok {
		return false
	}
	if idx, ok := parseIfindex(version, scope); ok {
		i, err := net.InterfaceByIndex(idx)
		return err == nil && i.Name != "lo"
	}
	i, err := net.InterfaceByName(scope)
	return err == nil && i.Name != "lo"
}

// sockaddrScript calls the parsers of the root's libsystemd-shared on
// each line of its input ("s HEX" for an address, "n HEX" for netlink)
// and prints the return value and the address family (with the first
// byte of an AF_UNIX path, 0 for an abstract name).
const sockaddrScript = `import ctypes, glob, sys
lib = ctypes.CDLL(glob.glob('/usr/lib/*/systemd/libsystemd-shared-*.so')[0])
buf = ctypes.create_string_buffer(4096)
out = []
for line in open(sys.argv[1], 'rb'):
    kind, _, h = line.strip().partition(b' ')
    ctypes.memset(buf, 0, 4096)
    f = lib.socket_address_parse_netlink if kind == b'n' else lib.socket_address_parse_and_warn
    r = f(buf, ctypes.c_char_p(bytes.fromhex(h.decode())))
    out.append('%d %d %d' % (r, int.from_bytes(buf.raw[0:2], 'little'), buf.raw[2]))
print('\n'.join(out))
`

// systemdSockaddr is systemd's verdict on each value: "refused" or the
// family as SocketFamily prints it.
func systemdSockaddr(t *testing.T, sd systemdtest.Systemd, values, netlink []string) []string {
	t.Helper()
	// The roots' python3 comes with cloud-init (fixtures/debian/build.sh).
	require.FileExists(t, filepath.Join(sd.Path(t), "usr/bin/python3"), "systemd %d's root has no python3", sd.Version)
	tree := t.TempDir()
	var in strings.Builder
	for _, v := range values {
		fmt.Fprintf(&in, "s %s\n", hex.EncodeToString([]byte(v)))
	}
	for _, v := range netlink {
		fmt.Fprintf(&in, "n %s\n", hex.EncodeToString([]byte(v)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(tree, "in"), []byte(in.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "sockaddr.py"), []byte(sockaddrScript), 0o644))
	o := sd.Run(t, tree, "python3", systemdtest.Tree+"/sockaddr.py", systemdtest.Tree+"/in")
	require.NoError(t, o.Err, "%s", o.Stderr)
	lines := strings.Split(strings.TrimSpace(string(o.Stdout)), "\n")
	require.Len(t, lines, len(values)+len(netlink))
	out := make([]string, len(lines))
	for i, l := range lines {
		var r, fam, b int
		_, err := fmt.Sscan(l, &r, &fam, &b)
		require.NoError(t, err, l)
		switch {
		case r < 0:
			out[i] = "refused"
		case fam == 1 && b == 0:
			out[i] = fmt.Sprint(FamilyAbstract)
		case fam == 1:
			out[i] = fmt.Sprint(FamilyUnix)
		case fam == 2:
			out[i] = fmt.Sprint(FamilyInet)
		case fam == 10:
			out[i] = fmt.Sprint(FamilyInet6)
		case fam == 40:
			out[i] = fmt.Sprint(FamilyVsock)
		default:
			out[i] = fmt.Sprintf("family %d", fam)
		}
	}
	return out
}

// sockaddrPieces are what random addresses are made of.
var sockaddrPieces = []string{
	"0", "1", "80", "65535", "65536", "255", "256", "01", "0x", "0b", "0o", "0X1f", "+", "-", " ", "\v", "\t",
	":", "::", ":::", ".", "[", "]", "%", "#", "@", "/", "lo", "all", "ffff", "fe80", "1.2.3.4", "127.0.0.1",
	"vsock:", "vsock-stream:", "vsock-dgram:", "host", "local", "x", "a", "4294967295", "2147483648", "99999",
}

func randomSockaddr(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		// A seed with a piece inserted, replaced or deleted.
		s := sockaddrSeeds[r.IntN(len(sockaddrSeeds))]
		i := r.IntN(len(s) + 1)
		switch r.IntN(3) {
		case 0:
			return s[:i] + sockaddrPieces[r.IntN(len(sockaddrPieces))] + s[i:]
		case 1:
			if i < len(s) {
				return s[:i] + s[i+1:]
			}
		}
		return s[:i] + string(rune(1+r.IntN(127))) + s[min(i+1, len(s)):]
	}
	var b strings.Builder
	for range 1 + r.IntN(6) {
		b.WriteString(sockaddrPieces[r.IntN(len(sockaddrPieces))])
	}
	return b.String()
}

func randomNetlink(r *rand.Rand) string {
	words := []string{"route", "audit", "kobject-uevent", "Route", "99", "0x10", "0b1", "+1", "-1", "-0", "1", " ",
		"\\", "\t", "\v", "x", "4294967295", "4294967296", "2147483647", "2147483648", "\"", "'"}
	var b strings.Builder
	for range 1 + r.IntN(4) {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(2) == 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func TestParseSocketAddress(t *testing.T) {
	for _, c := range []struct {
		v    string
		fam  SocketFamily
		ok52 bool
		ok57 bool
	}{
		{"80", FamilyInet6, true, true},
		{"0", 0, false, false},
		{"+0b1", FamilyInet6, false, true},
		{"1.2.3.4:80", FamilyInet, true, true},
		{"[::1]:80%1", FamilyInet6, true, true},
		{"[::1]:80%99999", FamilyInet6, true, false},
		{"vsock:host:1", FamilyVsock, false, true},
		{"vsock:2:4294967295", FamilyVsock, true, false},
		{"@x", FamilyAbstract, true, true},
		{"/x", FamilyUnix, true, true},
	} {
		for _, v := range []struct {
			version int
			ok      bool
		}{{252, c.ok52}, {257, c.ok57}} {
			fam, ok := ParseSocketAddress(v.version, c.v)
			assert.Equal(t, v.ok, ok, "%d %q", v.version, c.v)
			if ok {
				assert.Equal(t, c.fam, fam, "%d %q", v.version, c.v)
			}
		}
	}
	assert.True(t, ParseNetlinkAddress(252, "kobject-uevent 1"))
	assert.False(t, ParseNetlinkAddress(257, "kobject-uevent x"))
}

// FuzzParseSocketAddress checks that any listen value is judged without a
// panic, consistently: a kept AF_UNIX value is a path of 2 to 107 bytes,
// an IP address has no "#", "/" or "@", and both versions read a value
// the same way when it uses none of their differences (a scope, a "0b"
// prefix, vsock).
func FuzzParseSocketAddress(f *testing.F) {
	for _, s := range sockaddrSeeds {
		f.Add(s)
	}
	for _, s := range netlinkSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 1<<12 {
			return
		}
		for _, version := range []int{252, 257} {
			fam, ok := ParseSocketAddress(version, v)
			if ok && (fam == FamilyUnix || fam == FamilyAbstract) && (len(v) < 2 || len(v) > 107) {
				t.Fatalf("%d: %q kept as AF_UNIX", version, v)
			}
			if ok && (fam == FamilyInet || fam == FamilyInet6) && strings.ContainsAny(v, "#/@") {
				t.Fatalf("%d: %q kept as an IP address", version, v)
			}
			ParseNetlinkAddress(version, v)
		}
		plain := !strings.ContainsAny(v, "%bB") && !strings.HasPrefix(v, "vsock")
		if a, b := fmt.Sprint(ParseSocketAddress(252, v)), fmt.Sprint(ParseSocketAddress(257, v)); plain && a != b {
			t.Fatalf("%q: 252 %s, 257 %s", v, a, b)
		}
	})
}
