package guest

import (
	"testing"
	"testing/fstest"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArch(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "aarch64\n": "arm64",
		"armv7l": "", "armv8l": "", "i686": "", "ppc64le": "", "s390x": "", "riscv64": "", "": "",
	} {
		got, err := Arch(machine)
		if want == "" {
			assert.Error(t, err, machine)
			continue
		}
		require.NoError(t, err, machine)
		assert.Equal(t, want, got, machine)
	}
}

func TestBinary(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	defer enc.Close()
	packed := enc.EncodeAll([]byte("amilint for linux/arm64"), nil)
	corrupt := append([]byte(nil), packed...)
	corrupt[len(corrupt)-1] ^= 0xff // the frame's checksum
	fsys := fstest.MapFS{
		FileName("arm64"): {Data: packed},
		FileName("amd64"): {Data: corrupt},
		"README.md":       {Data: []byte("not a binary")},
	}
	assert.Equal(t, []string{"amd64", "arm64"}, Carried(fsys))

	b, err := Binary(fsys, "arm64")
	require.NoError(t, err)
	assert.Equal(t, "amilint for linux/arm64", string(b))

	_, err = Binary(fsys, "amd64")
	assert.ErrorContains(t, err, "decompress amilint_linux_amd64.zst")

	_, err = Binary(fstest.MapFS{FileName("amd64"): {Data: packed}}, "arm64")
	assert.EqualError(t, err, "no amilint for linux/arm64 guests: this plugin build carries linux/amd64 only")

	_, err = Binary(fstest.MapFS{}, "arm64")
	assert.ErrorContains(t, err, "carries no guest binaries (a development build: run make guest-binaries")
}

// TestEmbedded: what `make guest-binaries` wrote is what the plugin carries.
func TestEmbedded(t *testing.T) {
	for _, a := range Carried(Embedded()) {
		b, err := Binary(Embedded(), a)
		require.NoError(t, err, a)
		assert.Equal(t, "\x7fELF", string(b[:4]), a)
	}
}
