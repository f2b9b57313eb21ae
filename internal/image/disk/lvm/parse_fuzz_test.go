package lvm

import (
	"bytes"
	"os"
	"strings"
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
	f.Add([]byte(strings.Replace(strings.Replace(string(seed), "stripe_count = 1\n\nstripes = [\n\"pv0\", 0\n]",
		"stripe_count = 2\nstripe_size = 128\n\nstripes = [\n\"pv0\", 0,\n\"pv1\", 0\n]", 1),
		"physical_volumes {\n", "physical_volumes {\npv1 {\nid = \"Second-PVSe-cond-PVSe-cond-PVSe-condPV\"\npe_start = 2048\n}\n", 1)))
	f.Fuzz(func(t *testing.T, text []byte) {
		vg, err := parseVG(text, seedPVs())
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
	vg, err := parseVG(seed, seedPVs())
	require.NoError(t, err)
	require.Len(t, vg.LVs, 2)
	require.Equal(t, int64(24<<20), vg.LVs[0].Size())
	require.Len(t, vg.LVs[0].segs, 2)
	s := vg.LVs[0].segs[1]
	require.Equal(t, int64(12<<20), s.start)
	require.Equal(t, int64(12<<20), s.length)
	require.Len(t, s.areas, 1)
	require.Equal(t, int64(1<<20+15<<20), s.areas[0].off)
}

// seedPVs are the PVs testdata/vg.txt names: its pv0, and a second PV
// that a striped segment may name.
func seedPVs() []*PV {
	return []*PV{
		{uuid: "d5h2cUKRoYkwYP7CZDD36ooVFvTC04cC", r: bytes.NewReader(nil), size: 64 << 20},
		{uuid: "SecondPVSecondPVSecondPVSecondPV", r: bytes.NewReader(nil), size: 64 << 20},
	}
}
