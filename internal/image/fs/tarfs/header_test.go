package tarfs_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/integrity"
)

// TestHeaderChecksums proves what archive/tar verifies of a header: its
// checksum covers all 512 bytes of the block, so every single-byte change
// of every header block of a tarball GNU tar wrote (ustar and GNU long
// name headers, a directory, a symbolic link, files) makes the index fail
// with ErrCorrupt, naming the header block when it is the checksum that
// fails, or leaves the tree exactly as it was (a change inside the
// checksum field that keeps its value). Given as a plain file, as a gzip
// file and as a stream, the same.
func TestHeaderChecksums(t *testing.T) {
	src := t.TempDir()
	for name, body := range map[string]string{
		"etc/os-release":                     "ID=debian\n",
		"usr/lib/systemd/system/ssh.service": "[Service]\nExecStart=/usr/sbin/sshd\n",
		"usr/lib/systemd/system/" + strings.Repeat("x", 120) + ".service": "[Service]\n",
	} {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/ssh.service", filepath.Join(src, "etc/systemd/system/multi-user.target.wants/ssh.service")))
	tarball := filepath.Join(t.TempDir(), "root.tar")
	disktest.Run(t, "tar", "--format=gnu", "-C", src, "-cf", tarball, ".")
	orig, err := os.ReadFile(tarball)
	require.NoError(t, err)

	// The header blocks, walked as tar(5) lays them out.
	var headers []int
	for off := 0; off+512 <= len(orig); {
		h := orig[off : off+512]
		if bytes.Equal(h, make([]byte, 512)) {
			break
		}
		headers = append(headers, off)
		size, err := strconv.ParseInt(strings.Trim(string(h[124:136]), " \x00"), 8, 64)
		require.NoError(t, err)
		off += 512 + int(size+511)/512*512
	}
	require.GreaterOrEqual(t, len(headers), 8, "a header per entry, and a long name's")

	base, err := tarfs.Open(bytes.NewReader(orig), int64(len(orig)), tarfs.Options{})
	require.NoError(t, err)
	want := snapshot(t, base)
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		_, _ = w.Write(b)
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	opens := map[string]func(b []byte) (*tarfs.FS, error){
		"file": func(b []byte) (*tarfs.FS, error) {
			return tarfs.Open(bytes.NewReader(b), int64(len(b)), tarfs.Options{})
		},
		"gzip file": func(b []byte) (*tarfs.FS, error) {
			z := gz(b)
			return tarfs.Open(bytes.NewReader(z), int64(len(z)), tarfs.Options{})
		},
		"stream": func(b []byte) (*tarfs.FS, error) { return tarfs.OpenStream(bytes.NewReader(b), tarfs.StreamOptions{}) },
	}
	counts := map[string]int{}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			for _, h := range headers {
				for i := range 512 {
					if name != "file" && i%7 != 0 {
						continue // a seventh of the bytes, compressed: the same code
					}
					b := bytes.Clone(orig)
					b[h+i] ^= 0x01
					f, err := open(b)
					if err == nil {
						counts["same"]++
						require.Equal(t, want, snapshot(t, f), "header at %d, byte %d changed the tree without an error", h, i)
						require.True(t, i >= 148 && i < 156, "only the checksum field can change and keep its value: header at %d, byte %d", h, i)
						continue
					}
					require.ErrorIs(t, err, tarfs.ErrCorrupt, "header at %d, byte %d", h, i)
					if m, ok := integrity.As(err); ok {
						counts["checksum"]++
						at := fmt.Sprintf("at byte %d of the tar stream", h)
						if name == "file" {
							at = fmt.Sprintf("at byte %d", h)
						}
						assert.Regexp(t, `^tar: header of entry \d+ `+at+` fails its checksum$`, m.Error())
					} else {
						counts["other"]++
						t.Logf("other: header %d byte %d: %v", h, i, err)
					}
				}
			}
		})
	}
	t.Logf("flips: %v", counts)
	assert.Positive(t, counts["checksum"])
}
