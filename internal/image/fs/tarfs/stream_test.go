package tarfs_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// onlyReader hides everything but Read, as a pipe would.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func keepAll(string, int64, fs.FileMode) bool { return true }

// TestStreamMatchesTree packs the test tree with GNU tar in every style
// and compression and reads it once as a stream: keeping everything, the
// index equals the directory; with the default choice, configuration and
// unit files are read and the large blob is metadata only.
func TestStreamMatchesTree(t *testing.T) {
	dir := tree(t)
	d, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	want := snapshot(t, d)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"plain", []string{"-cf", "X", "-C", dir, "."}},
		{"docker export style", []string{"-cf", "X", "-C", dir, "etc", "usr"}},
		{"gzip", []string{"-czf", "X", "-C", dir, "."}},
		{"zstd", []string{"--zstd", "-cf", "X", "-C", dir, "."}},
		{"pax", []string{"--format=pax", "-cf", "X", "-C", dir, "."}},
		{"v7", []string{"--format=v7", "-cf", "X", "-C", dir, "."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "root.tar")
			args := append([]string{}, tt.args...)
			for i, a := range args {
				if a == "X" {
					args[i] = out
				}
			}
			disktest.Run(t, "tar", args...)
			b, err := os.ReadFile(out)
			require.NoError(t, err)

			all, err := tarfs.OpenStream(onlyReader{bytes.NewReader(b)}, tarfs.StreamOptions{Keep: keepAll})
			require.NoError(t, err)
			assert.Equal(t, want, snapshot(t, all))

			tf, err := tarfs.OpenStream(onlyReader{bytes.NewReader(b)}, tarfs.StreamOptions{})
			require.NoError(t, err)
			v := rootfs.New(tf)
			for _, name := range []string{"etc/os-release", "etc/hostname.hard", "etc/systemd/system/multi-user.target.wants/ecs.service"} {
				got, err := v.ReadFile(name)
				require.NoError(t, err, name)
				wantB, err := rootfs.New(d).ReadFile(name)
				require.NoError(t, err)
				assert.Equal(t, wantB, got, name)
			}
			fi, err := tf.Lstat("usr/share/blob/data")
			require.NoError(t, err)
			assert.Equal(t, int64(300<<10), fi.Size())
			assert.Equal(t, fs.FileMode(0o644), fi.Mode())
			_, err = tf.Open("usr/share/blob/data")
			require.ErrorIs(t, err, tarfs.ErrNotKept)
		})
	}
}

// TestStreamHugeFileNotHeld streams a tarball with a 256 MiB file through a
// pipe under a 1 MiB memory cap: the file is indexed as metadata and never
// read into memory (holding it would exceed the cap and fail).
func TestStreamHugeFileNotHeld(t *testing.T) {
	const size = 256 << 20
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		tw := tar.NewWriter(zw)
		_ = tw.WriteHeader(&tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10})
		_, _ = tw.Write([]byte("ID=debian\n"))
		_ = tw.WriteHeader(&tar.Header{Name: "usr/bin/huge", Typeflag: tar.TypeReg, Mode: 0o755, Size: size})
		_, _ = io.CopyN(tw, zeros{}, size)
		_ = tw.Close()
		_ = zw.Close()
		pw.Close()
	}()
	tf, err := tarfs.OpenStream(pr, tarfs.StreamOptions{MaxMemory: 1 << 20})
	require.NoError(t, err)
	fi, err := tf.Lstat("usr/bin/huge")
	require.NoError(t, err)
	assert.Equal(t, int64(size), fi.Size())
	assert.Equal(t, fs.FileMode(0o755), fi.Mode())
	b, err := tf.ReadFile("etc/os-release")
	require.NoError(t, err)
	assert.Equal(t, "ID=debian\n", string(b))
}

func TestStreamKeep(t *testing.T) {
	for _, tt := range []struct {
		name string
		size int64
		mode fs.FileMode
		want bool
	}{
		{"etc/ecs/ecs.config", 100, 0o644, true},
		{"etc/ssh/moduli", 600 << 10, 0o644, true},
		{"etc/huge", 2 << 20, 0o644, false},
		{"usr/lib/systemd/system/ssh.service", 300, 0o644, true},
		{"lib/systemd/system-preset/90-systemd.preset", 300, 0o644, true},
		{"usr/lib/os-release", 300, 0o644, true},
		{"var/lib/amazon/ssm/registration", 300, 0o600, true},
		{"opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json", 3000, 0o644, true},
		{"opt/aws/amazon-cloudwatch-agent/etc/common-config", 3000, 0o644, true},
		{"opt/conda/lib/python3.10/os.py", 3000, 0o644, false},
		{"opt/app/settings.yaml", 100 << 10, 0o644, false},
		{"usr/bin/sshd", 900 << 10, 0o755, false},
		{"usr/share/doc/x/copyright", 300, 0o644, false},
		{"etc", 0, 0o644, true},
	} {
		assert.Equal(t, tt.want, tarfs.StreamKeep(tt.name, tt.size, tt.mode), tt.name)
	}
}

func TestStreamErrors(t *testing.T) {
	good := build(t, []entry{{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"}, {name: "etc/big", typ: tar.TypeReg, body: string(make([]byte, 5000))}})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(good)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	badCRC := bytes.Clone(gz.Bytes())
	badCRC[len(badCRC)-8]++ // the trailer's CRC-32
	zs, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	zst := zs.EncodeAll(good, nil)
	for _, tt := range []struct {
		name string
		data []byte
		opt  tarfs.StreamOptions
		want error
		msg  string
	}{
		{"empty", nil, tarfs.StreamOptions{}, tarfs.ErrCorrupt, "empty"},
		{"truncated tar", good[:1024+100], tarfs.StreamOptions{}, tarfs.ErrCorrupt, ""},
		{"truncated gzip", gz.Bytes()[:60], tarfs.StreamOptions{}, tarfs.ErrCorrupt, ""},
		{"gzip checksum", badCRC, tarfs.StreamOptions{}, tarfs.ErrCorrupt, "gzip"},
		{"truncated zstd", zst[:len(zst)/2], tarfs.StreamOptions{}, tarfs.ErrCorrupt, ""},
		{"not a tarball", bytes.Repeat([]byte("junk"), 200), tarfs.StreamOptions{}, tarfs.ErrCorrupt, "no tar header"},
		{"a qcow2 image", append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 1000)...), tarfs.StreamOptions{}, tarfs.ErrCorrupt, "qcow2"},
		{"hard link to nothing", build(t, []entry{{name: "h", typ: tar.TypeLink, link: "nope"}}), tarfs.StreamOptions{}, tarfs.ErrCorrupt, ""},
		{"over the memory cap", gz.Bytes(), tarfs.StreamOptions{MaxMemory: 1000}, tarfs.ErrTooLarge, "as a file"},
		{"too many entries", good, tarfs.StreamOptions{MaxEntries: 1}, tarfs.ErrTooLarge, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tarfs.OpenStream(onlyReader{bytes.NewReader(tt.data)}, tt.opt)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	// The zstd stream itself reads.
	_, err = tarfs.OpenStream(bytes.NewReader(zst), tarfs.StreamOptions{})
	require.NoError(t, err)
}

func FuzzOpenStream(f *testing.F) {
	b := build(f, []entry{
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"},
		{name: "etc/l", typ: tar.TypeSymlink, link: "/etc/os-release"},
		{name: "etc/h", typ: tar.TypeLink, link: "etc/os-release"},
		{name: "usr/bin/x", typ: tar.TypeReg, body: "binary"},
	})
	f.Add(b)
	f.Add(b[:700])
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(b)
	_ = zw.Close()
	f.Add(gz.Bytes())
	zs, err := zstd.NewWriter(nil)
	require.NoError(f, err)
	f.Add(zs.EncodeAll(b, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		tf, err := tarfs.OpenStream(onlyReader{bytes.NewReader(data)}, tarfs.StreamOptions{MaxMemory: 1 << 20, MaxEntries: 1000})
		if err != nil {
			return
		}
		_ = fs.WalkDir(tf, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				_, _ = tf.ReadFile(p)
			}
			return nil
		})
	})
}

// TestStreamZstdWindowBounded feeds a zstd frame that asks for a 256 MiB
// window: refused as corrupt rather than allocated.
func TestStreamZstdWindowBounded(t *testing.T) {
	good := build(t, []entry{{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"}})
	// A frame by hand (RFC 8878): magic, a header descriptor without
	// single segment, a window descriptor of 2^(10+18) bytes, then the
	// tarball as one raw last block.
	var buf bytes.Buffer
	buf.WriteString("\x28\xb5\x2f\xfd\x00")
	buf.WriteByte(18 << 3)
	h := uint32(len(good))<<3 | 1
	buf.Write([]byte{byte(h), byte(h >> 8), byte(h >> 16)})
	buf.Write(good)
	// The same frame with a 1 MiB window reads: the frame is well made.
	small := bytes.Clone(buf.Bytes())
	small[5] = 10 << 3
	_, err := tarfs.OpenStream(bytes.NewReader(small), tarfs.StreamOptions{})
	require.NoError(t, err)
	_, err = tarfs.OpenStream(bytes.NewReader(buf.Bytes()), tarfs.StreamOptions{})
	require.ErrorIs(t, err, tarfs.ErrCorrupt)
	assert.ErrorContains(t, err, "window")
	tf, err := openTarBytes(t, buf.Bytes())
	if err == nil {
		_, err = tf.ReadFile("etc/os-release")
	}
	require.Error(t, err, "the indexed reader bounds the window too")
}

func openTarBytes(t *testing.T, b []byte) (*tarfs.FS, error) {
	p := filepath.Join(t.TempDir(), "w.tar.zst")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return openTar(t, p, tarfs.Options{})
}

// TestStreamHostileNames indexes the hostile tarball of TestHostileNames
// as a stream: names are clamped at the root and links kept as stored,
// exactly as the indexed reader does.
func TestStreamHostileNames(t *testing.T) {
	b := build(t, []entry{
		{name: "../../x", typ: tar.TypeReg, body: "x1"},
		{name: "/etc/passwd", typ: tar.TypeReg, body: "root"},
		{name: "a/../../../b", typ: tar.TypeReg, body: "b"},
		{name: "./etc/../etc/shadow-link", typ: tar.TypeSymlink, link: "../../../../etc/shadow"},
		{name: "h", typ: tar.TypeLink, link: "../../../etc/passwd"},
		{name: "etc/.wh.gone", typ: tar.TypeReg, body: "whiteout"},
		{name: "x", typ: tar.TypeReg, body: "x2, the last wins"},
		{name: "d", typ: tar.TypeReg, body: "file first"},
		{name: "d/inner", typ: tar.TypeReg, body: "then a directory over it"},
	})
	indexed, err := tarfs.Open(bytes.NewReader(b), int64(len(b)), tarfs.Options{})
	require.NoError(t, err)
	streamed, err := tarfs.OpenStream(onlyReader{bytes.NewReader(b)}, tarfs.StreamOptions{Keep: keepAll})
	require.NoError(t, err)
	assert.Equal(t, snapshot(t, indexed), snapshot(t, streamed))
	got, err := rootfs.New(streamed).ReadFile("etc/shadow-link")
	assert.Error(t, err, "the link resolves inside the tarball, where etc/shadow is not: %q", got)
	got, err = streamed.ReadFile("h")
	require.NoError(t, err)
	assert.Equal(t, "root", string(got))
}

// TestCompressedReadToTheEnd: a file and a stream alike are read to the
// end of their compressed stream: a gzip trailer that does not match
// (CRC or length), a missing trailer, reserved flags, data after the last
// member, a wrong zstd checksum, and more than 1 MiB after the end of the
// archive are all corrupt; padding and a second member are not.
func TestCompressedReadToTheEnd(t *testing.T) {
	good := build(t, []entry{{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"}})
	gzipOf := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(b)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return buf.Bytes()
	}
	gz := gzipOf(good)
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[(i+len(c))%len(c)] ^= 0x10
		return c
	}
	zs, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	require.NoError(t, err)
	zst := zs.EncodeAll(good, nil)
	for _, tt := range []struct {
		name string
		data []byte
		msg  string // "" when it must open
	}{
		{"gzip", gz, ""},
		{"two members", append(gzipOf(good[:700]), gzipOf(good[700:])...), ""},
		{"padding after the archive", gzipOf(append(bytes.Clone(good), make([]byte, 64<<10)...)), ""},
		{"gzip CRC", flip(gz, -8), "CRC-32 or length"},
		{"gzip length", flip(gz, -1), "CRC-32 or length"},
		{"no trailer", gz[:len(gz)-8], "truncated"},
		{"reserved flag", append([]byte{0x1f, 0x8b, 8, 0x20}, gz[4:]...), "reserved flags 0x20"},
		{"junk after the member", append(bytes.Clone(gz), "junk"...), "data after member 1"},
		{"second member corrupt", append(bytes.Clone(gz), flip(gz, -8)...), "member 2"},
		{"a second archive", gzipOf(append(bytes.Clone(good), make([]byte, 2<<20)...)), "after the end of the archive"},
		{"zstd", zst, ""},
		{"zstd checksum", flip(zst, -1), "zstd"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, serr := tarfs.OpenStream(onlyReader{bytes.NewReader(tt.data)}, tarfs.StreamOptions{})
			_, ferr := tarfs.Open(bytes.NewReader(tt.data), int64(len(tt.data)), tarfs.Options{})
			for what, err := range map[string]error{"stream": serr, "file": ferr} {
				if tt.msg == "" {
					assert.NoError(t, err, what)
					continue
				}
				assert.ErrorIs(t, err, tarfs.ErrCorrupt, what)
				assert.ErrorContains(t, err, tt.msg, what)
			}
		})
	}
}
