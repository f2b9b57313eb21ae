package bytesize

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "4096": 4096, "4096B": 4096, "1KiB": 1 << 10, "512MiB": 512 << 20, "2GiB": 2 << 30,
		"64Mi": 64 << 20, "3Gi": 3 << 30, "7Ki": 7 << 10,
	} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", " 1GiB", "1 GiB", "1GB", "1e9", "99999999999GiB", "18446744073709551616"} {
		_, err := Parse(in)
		assert.Error(t, err, in)
	}
	for n, want := range map[uint64]string{0: "0B", 1: "1B", 1 << 10: "1KiB", 1536: "1536B", 512 << 20: "512MiB", 2 << 30: "2GiB", 3<<30 + 1<<20: "3073MiB"} {
		assert.Equal(t, want, Format(n))
	}
}

// FuzzParse: a size either fails or reads back from how Format
// writes it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "512MiB", "2GiB", "64Mi", "1B", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(Format(n))
		require.NoError(t, err, Format(n))
		require.Equal(t, n, back)
	})
}
