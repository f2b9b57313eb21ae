package cli

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
)

// TestChecksumMismatchExitsTwo is the contract "never a silent wrong
// answer" end to end: one byte of the multi-user.target.wants directory
// block of the hardened fixture's ext4 root, in a GPT disk, flipped in an
// entry's name. scan exits 2 with the one line naming the format, the
// structure, where it is and the directory being read; --allow-corrupt
// reads on and reports it as an image-corrupt finding (high: exit 1).
func TestChecksumMismatchExitsTwo(t *testing.T) {
	fsImg := disktest.Ext4(t, materialize(t, "hardened"), "32M")
	wants := "/etc/systemd/system/multi-user.target.wants"
	bmap := strings.Fields(disktest.Run(t, "debugfs", "-R", "bmap "+wants+" 0", fsImg)) // a banner, then the block
	blk, err := strconv.ParseInt(bmap[len(bmap)-1], 10, 64)
	require.NoError(t, err)
	bs, err := strconv.ParseInt(regexp.MustCompile(`Block size:\s+(\d+)`).FindStringSubmatch(disktest.Run(t, "dumpe2fs", "-h", fsImg))[1], 10, 64)
	require.NoError(t, err)
	disk := disktest.GPTRoot(t, fsImg)
	b, err := os.ReadFile(disk)
	require.NoError(t, err)
	const part2 = (2048 + 16384) * 512
	at := part2 + blk*bs + 12 + 12 + 8 + 2 // the third entry's name, after "." and ".."
	b[at] ^= 0x20
	require.NoError(t, os.WriteFile(disk, b, 0o644))
	line := fmt.Sprintf("%s: partition 2: ext4: directory block %d (%s) fails its checksum", disk, blk, wants)

	code, out, stderr := runCLI(t, "scan", disk)
	assert.Equal(t, ExitError, code, out)
	assert.Empty(t, out)
	assert.Equal(t, "amilint scan: "+line+" (--allow-corrupt reads on and reports it)\n", stderr)
	code, _, stderr = runCLI(t, "units", disk, "-o", "tsv")
	assert.Equal(t, ExitError, code)
	assert.Equal(t, "amilint units: "+line+" (--allow-corrupt reads on and reports it)\n", stderr)

	code, rep, stderr := scanJSON(t, disk, "--allow-corrupt")
	require.Equal(t, ExitFindings, code, stderr)
	f := findingOf(rep, "image-corrupt", "")
	require.NotNil(t, f, "an image-corrupt finding")
	assert.Equal(t, line, f.Message)
	assert.Equal(t, "high", f.Severity.String())
	assert.Contains(t, stderr, "amilint: warning: "+line)
	code, _, stderr = runCLI(t, "units", disk, "--allow-corrupt", "-o", "tsv")
	assert.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stderr, "amilint: warning: "+line)
}
