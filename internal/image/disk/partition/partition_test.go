package partition_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disk/partition"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
)

// disk makes a sparse file of size bytes, partitioned by setup.
func disk(t testing.TB, size int64, setup func(path string)) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.NoError(t, os.Truncate(p, size))
	setup(p)
	return p
}

// MBRDisk is a 96 MiB disk with a primary, an extended partition and two
// logical ones, as sfdisk writes it.
func mbrDisk(t testing.TB) string {
	return disk(t, 96<<20, func(p string) {
		cmd := fmt.Sprintf("label: dos\n%[1]s1 : start=2048, size=8M, type=83\n%[1]s2 : start=18432, size=80M, type=5\n"+
			"%[1]s5 : start=20480, size=40M, type=83\n%[1]s6 : start=104448, size=16M, type=83\n", p)
		runStdin(t, cmd, "sfdisk", "-q", p)
	})
}

func gptDisk(t testing.TB) string {
	return disk(t, 96<<20, func(p string) {
		disktest.Run(t, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-c", "1:EFI",
			"-n", "2:0:+40M", "-t", "2:8300", "-c", "2:root", "-n", "3:0:0", "-t", "3:8e00", p)
	})
}

func runStdin(t testing.TB, stdin string, name string, args ...string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "stdin")
	require.NoError(t, os.WriteFile(f, []byte(stdin), 0o644))
	disktest.Run(t, "sh", "-c", fmt.Sprintf("%s %s < %s", name, strings.Join(args, " "), f))
}

// sfdiskTable is what `sfdisk -J` reports, the reference for our reading.
func sfdiskTable(t *testing.T, p string) []partition.Partition {
	var out struct {
		Partitiontable struct {
			Label      string
			ID         string
			Sectorsize int64
			Partitions []struct {
				Node  string
				Start int64
				Size  int64
				Type  string
				Name  string
				UUID  string
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(disktest.Run(t, "sfdisk", "-J", p)), &out))
	var ps []partition.Partition
	for _, q := range out.Partitiontable.Partitions {
		var n int
		_, err := fmt.Sscanf(strings.TrimPrefix(q.Node, p), "%d", &n)
		require.NoError(t, err)
		typ := strings.ToUpper(q.Type)
		if len(typ) <= 2 {
			var v int
			_, err := fmt.Sscanf(typ, "%x", &v)
			require.NoError(t, err)
			typ = fmt.Sprintf("0x%02X", v)
		}
		// A GPT entry's unique GUID, or the MBR signature and number, as
		// udev's by-partuuid link spells them (blkid: lower case).
		uuid := strings.ToLower(q.UUID)
		if out.Partitiontable.Label == "dos" {
			var sig uint32
			_, err := fmt.Sscanf(out.Partitiontable.ID, "0x%x", &sig)
			require.NoError(t, err)
			uuid = fmt.Sprintf("%08x-%02x", sig, n)
		}
		ps = append(ps, partition.Partition{Number: n, Start: q.Start * 512, Size: q.Size * 512, Type: typ, Name: q.Name, UUID: uuid})
	}
	return ps
}

func read(t *testing.T, p string) (*partition.Table, error) {
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	return partition.Read(f, fi.Size())
}

// TestTablesMatchSfdisk checks our reading of real tables against sfdisk's
// own, and that the bytes of a filesystem copied into a logical partition
// read back unchanged.
func TestTablesMatchSfdisk(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "32M")
	want, size := disktest.FileSHA256(t, raw)
	for _, tt := range []struct {
		name   string
		make   func(testing.TB) string
		scheme partition.Scheme
		part   int
	}{
		{"mbr with logical partitions", mbrDisk, partition.MBR, 5},
		{"gpt", gptDisk, partition.GPT, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.make(t)
			tab, err := read(t, p)
			require.NoError(t, err)
			assert.Equal(t, tt.scheme, tab.Scheme)
			var ext []partition.Partition
			for _, q := range sfdiskTable(t, p) {
				if q.Type == partition.TypeMBRExtendedCHS {
					continue // the container, not a volume
				}
				ext = append(ext, q)
			}
			assert.Equal(t, ext, tab.Partitions)

			part, ok := tab.Find(tt.part)
			require.True(t, ok)
			disktest.Run(t, "dd", "if="+raw, "of="+p, "bs=1M", "conv=notrunc,sparse", "status=none",
				fmt.Sprintf("seek=%d", part.Start), "oflag=seek_bytes")
			f, err := os.Open(p)
			require.NoError(t, err)
			defer f.Close()
			assert.Equal(t, want, disktest.SHA256(t, part.Section(f), size))
		})
	}
}

func TestNoTable(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	tab, err := read(t, raw)
	require.NoError(t, err)
	assert.Equal(t, partition.None, tab.Scheme)
	assert.Empty(t, tab.Partitions)
}

func damage(t *testing.T, src string, f func(b []byte) []byte) string {
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), "bad.raw")
	require.NoError(t, os.WriteFile(dst, f(b), 0o644))
	return dst
}

func TestGPTBackupHeader(t *testing.T) {
	good := gptDisk(t)
	wantTab, err := read(t, good)
	require.NoError(t, err)
	require.Empty(t, wantTab.Warnings)
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		warn   string
	}{
		{"primary header", func(b []byte) []byte { b[512+40]++; return b },
			"gpt: primary header at LBA 1 fails its checksum: the backup at LBA 196607 was read, as gdisk and UEFI firmware would (Linux reads it only with its gpt parameter)"},
		{"primary entries", func(b []byte) []byte { b[1024+60]++; return b },
			"gpt: partition entry array at LBA 2 of the primary header fails its checksum: the backup"},
		{"backup header", func(b []byte) []byte { b[len(b)-512+40]++; return b },
			"gpt: backup header at LBA 196607 fails its checksum: the primary was read, as Linux does"},
		{"backup entries", func(b []byte) []byte { b[len(b)-33*512+60]++; return b },
			"gpt: partition entry array at LBA 196575 of the backup header fails its checksum: the primary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := read(t, damage(t, good, tc.damage))
			require.NoError(t, err, "the other copy is read")
			assert.Equal(t, wantTab.Partitions, tab.Partitions)
			require.Len(t, tab.Warnings, 1)
			assert.True(t, strings.HasPrefix(tab.Warnings[0], tc.warn), "%s", tab.Warnings[0])
		})
	}
}

// TestGPTChecksums: when no copy of a GPT passes its checksums, a strict
// read fails naming the primary's structure; a lenient one logs that line
// and reads the primary as stored.
func TestGPTChecksums(t *testing.T) {
	good := gptDisk(t)
	wantTab, err := read(t, good)
	require.NoError(t, err)
	p := damage(t, good, func(b []byte) []byte { b[512+40]++; b[len(b)-512+40]++; return b })
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	_, err = partition.ReadWith(f, fi.Size(), integrity.Strict("disk.img"))
	require.ErrorIs(t, err, integrity.ErrChecksum)
	require.ErrorIs(t, err, partition.ErrCorrupt)
	assert.EqualError(t, err, "disk.img: gpt: primary header at LBA 1 fails its checksum")
	var log integrity.Log
	tab, err := partition.ReadWith(f, fi.Size(), integrity.Lenient(&log))
	require.NoError(t, err)
	assert.Equal(t, wantTab.Partitions, tab.Partitions)
	assert.Equal(t, []string{"gpt: primary header at LBA 1 fails its checksum"}, log.Lines())
}

func TestCorrupt(t *testing.T) {
	mbr, gpt := mbrDisk(t), gptDisk(t)
	le := binary.LittleEndian
	// ebr is the byte offset of the first extended boot record.
	ebr := func(b []byte) int { return int(le.Uint32(b[446+16+8:])) * 512 }
	for _, tt := range []struct {
		name   string
		src    string
		damage func(b []byte) []byte
	}{
		{"mbr primary past the end", mbr, func(b []byte) []byte { le.PutUint32(b[446+12:], 1<<30); return b }},
		{"mbr extended past the end", mbr, func(b []byte) []byte { le.PutUint32(b[446+16+12:], 1<<30); return b }},
		{"mbr logical past the end", mbr, func(b []byte) []byte { le.PutUint32(b[ebr(b)+446+12:], 1<<28); return b }},
		{"mbr extended chain loops", mbr, func(b []byte) []byte {
			// The second EBR links to itself.
			second := ebr(b) + int(le.Uint32(b[ebr(b)+446+16+8:]))*512
			return loopEBR(b, second, second)
		}},
		{"mbr truncated before the EBR", mbr, func(b []byte) []byte { return b[:ebr(b)+100] }},
		{"gpt both headers damaged", gpt, func(b []byte) []byte { b[512+40]++; b[len(b)-512+40]++; return b }},
		{"gpt entry past the end", gpt, func(b []byte) []byte { return b[:len(b)-(40<<20)] }},
		{"gpt entries LBA wraps into the disk", gpt, func(b []byte) []byte {
			// 2^55+2 sectors of 512 bytes wrap to byte 1024, where the
			// entries really are; the backup header is damaged too.
			h := b[512 : 512+92]
			le.PutUint64(h[72:], 1<<55+2)
			le.PutUint32(h[16:], 0)
			le.PutUint32(h[16:], crc32.ChecksumIEEE(h))
			b[len(b)-512+40]++
			return b
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := read(t, damage(t, tt.src, tt.damage))
			require.ErrorIs(t, err, partition.ErrCorrupt)
		})
	}
}

// loopEBR makes the EBR at second link to the EBR at first, a cycle.
func loopEBR(b []byte, first, second int) []byte {
	le := binary.LittleEndian
	extStart := int(le.Uint32(b[446+16+8:])) * 512
	e := b[second+446+16:]
	e[4] = 0x05
	le.PutUint32(e[8:], uint32((first-extStart)/512))
	le.PutUint32(e[12:], 1)
	return b
}

func FuzzRead(f *testing.F) {
	for _, p := range []string{mbrDisk(f), gptDisk(f)} {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		// The tables live in the first MiB and the last 32 sectors; keep
		// the seed small by cutting out the (zero) middle.
		f.Add(append(b[:1<<20:1<<20], b[len(b)-16896:]...))
		f.Add(b[:4096])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Strictly, then leniently (a GPT header or entry array whose
		// checksum fails in both copies is read as stored).
		var log integrity.Log
		for _, check := range []*integrity.Checker{nil, integrity.Lenient(&log)} {
			tab, err := partition.ReadWith(bytes.NewReader(data), int64(len(data)), check)
			if err != nil {
				continue
			}
			for _, p := range tab.Partitions {
				if p.Start < 0 || p.Size <= 0 || p.Start+p.Size > int64(len(data)) {
					t.Fatalf("partition %+v outside %d bytes", p, len(data))
				}
			}
		}
	})
}

// TestGPT4KSectors reads a GPT written by sgdisk on a loop device with
// 4096-byte logical sectors, checked against sfdisk's reading of it.
func TestGPT4KSectors(t *testing.T) {
	testenv.Root(t, "a 4K-sector loop device")
	p := disktest.Blank(t, 64<<20)
	loop := strings.TrimSpace(disktest.Run(t, "losetup", "-f", "--show", "-b", "4096", p))
	disktest.Run(t, "sgdisk", "-n", "1:0:+8M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:8300", "-c", "2:root", loop)
	var out struct {
		Partitiontable struct {
			Sectorsize int64
			Partitions []struct{ Start, Size int64 }
		}
	}
	err := json.Unmarshal([]byte(disktest.Run(t, "sfdisk", "-J", loop)), &out)
	disktest.Run(t, "losetup", "-d", loop)
	require.NoError(t, err)
	require.Equal(t, int64(4096), out.Partitiontable.Sectorsize)

	tab, err := read(t, p)
	require.NoError(t, err)
	assert.Equal(t, partition.GPT, tab.Scheme)
	require.Len(t, tab.Partitions, len(out.Partitiontable.Partitions))
	for i, q := range out.Partitiontable.Partitions {
		assert.Equal(t, q.Start*4096, tab.Partitions[i].Start)
		assert.Equal(t, q.Size*4096, tab.Partitions[i].Size)
	}
	assert.Equal(t, "root", tab.Partitions[1].Name)
}

// failAfter is a disk that reads from b up to limit and fails beyond it.
type failAfter struct {
	b     []byte
	limit int64
	err   error
}

func (f failAfter) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.limit {
		return 0, f.err
	}
	return copy(p, f.b[off:]), nil
}

// TestGPTReadErrorKept reads a GPT disk whose headers cannot be read: the
// disk's own error stays in the chain, so a caller can tell a failed read
// (a remote block, a cancelled context) from a damaged table.
func TestGPTReadErrorKept(t *testing.T) {
	b, err := os.ReadFile(gptDisk(t))
	require.NoError(t, err)
	errDisk := errors.New("block fetch failed")
	_, err = partition.Read(failAfter{b: b, limit: 512, err: errDisk}, int64(len(b)))
	require.ErrorIs(t, err, errDisk)
}
