package lvm

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseVG runs the metadata text parser and the volume group reading on
// arbitrary text, seeded with metadata lvm2 wrote (testdata/vg.txt, taken
// from a PV the tests build).
func FuzzParseVG(f *testing.F) {
	seed, err := os.ReadFile("testdata/vg.txt")
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte("vg { a = [ \"x\", 1 , ] b { c = \"\\\"\" } } # c"))
	f.Fuzz(func(t *testing.T, text []byte) {
		vg, err := parseVG(text, "d5h2cUKRoYkwYP7CZDD36ooVFvTC04cC", bytes.NewReader(nil), 64<<20)
		if err != nil {
			return
		}
		for _, lv := range vg.LVs {
			if lv.Err() == nil && lv.Size() <= 0 {
				t.Fatalf("LV %s readable with size %d", lv.Name, lv.Size())
			}
		}
	})
}

func TestParseSeedReadsVG(t *testing.T) {
	seed, err := os.ReadFile("testdata/vg.txt")
	require.NoError(t, err)
	vg, err := parseVG(seed, "d5h2cUKRoYkwYP7CZDD36ooVFvTC04cC", bytes.NewReader(nil), 64<<20)
	require.NoError(t, err)
	require.Len(t, vg.LVs, 2)
	require.Equal(t, int64(24<<20), vg.LVs[0].Size())
	require.Len(t, vg.LVs[0].segs, 2)
	require.Equal(t, segment{start: 12 << 20, length: 12 << 20, pvOff: 1<<20 + 15<<20}, vg.LVs[0].segs[1])
}
