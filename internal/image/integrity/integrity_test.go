package integrity_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/integrity"
)

var errCorrupt = errors.New("corrupt test filesystem")

func TestChecksumFunctions(t *testing.T) {
	check := []byte("123456789")
	// The standard check values of the catalogue of CRC algorithms.
	assert.Equal(t, uint32(0xE3069283), integrity.CRC32C(check), "CRC-32C")
	assert.Equal(t, uint16(0xBB3D), integrity.CRC16(0, check), "CRC-16/ARC")
	assert.Equal(t, uint16(0x4B37), integrity.CRC16(0xFFFF, check), "CRC-16/MODBUS")
	// The kernel's crc32c(~0, p) is the register without the final
	// inversion: the standard CRC32C inverted.
	assert.Equal(t, ^integrity.CRC32C(check), integrity.CRC32CRaw(^uint32(0), check))
	// Raw updates chain like the kernel's.
	assert.Equal(t, integrity.CRC32CRaw(^uint32(0), check),
		integrity.CRC32CRaw(integrity.CRC32CRaw(^uint32(0), check[:4]), check[4:]))
	assert.Equal(t, integrity.CRC32C(check), integrity.CRC32CUpdate(integrity.CRC32CUpdate(0, check[:3]), check[3:]))
	assert.Equal(t, crc32.Checksum(check, crc32.MakeTable(crc32.Castagnoli)), integrity.CRC32C(check))
}

func TestMismatch(t *testing.T) {
	m := &integrity.Mismatch{Where: "disk.img: partition 2", Format: "ext4", Structure: "directory block 4389",
		Path: "/etc/systemd/system/multi-user.target.wants", Corrupt: errCorrupt}
	assert.Equal(t, "disk.img: partition 2: ext4: directory block 4389 (/etc/systemd/system/multi-user.target.wants) fails its checksum", m.Error())
	err := fmt.Errorf("read x: %w", m)
	assert.ErrorIs(t, err, integrity.ErrChecksum)
	assert.ErrorIs(t, err, errCorrupt)
	got, ok := integrity.As(err)
	require.True(t, ok)
	assert.Same(t, m, got)
	assert.Equal(t, "ext4: superblock fails its checksum", (&integrity.Mismatch{Format: "ext4", Structure: "superblock"}).Error())
}

func TestWithPath(t *testing.T) {
	m := &integrity.Mismatch{Format: "xfs", Structure: "inode 131", Corrupt: errCorrupt}
	err := integrity.WithPath(fmt.Errorf("inode 131: %w", m), "/etc/os-release")
	assert.Equal(t, "xfs: inode 131 (/etc/os-release) fails its checksum", err.Error())
	assert.Empty(t, m.Path, "the original is not changed: another reader may hold it")
	// A path already named stays; an error without a mismatch passes.
	assert.Same(t, err, integrity.WithPath(err, "/other"))
	plain := errors.New("bad block")
	assert.Same(t, plain, integrity.WithPath(plain, "/x"))
}

func TestChecker(t *testing.T) {
	m := func() *integrity.Mismatch {
		return &integrity.Mismatch{Format: "gpt", Structure: "primary header at LBA 1", Corrupt: errCorrupt}
	}
	var nilChecker *integrity.Checker
	err := nilChecker.Fail(m())
	require.Error(t, err)
	assert.Equal(t, "gpt: primary header at LBA 1 fails its checksum", err.Error())
	assert.False(t, nilChecker.Lenient())
	assert.Nil(t, nilChecker.Lines())

	strict := integrity.Strict("disk.img").Within("partition 2")
	assert.Equal(t, "disk.img: partition 2: gpt: primary header at LBA 1 fails its checksum", strict.Fail(m()).Error())
	assert.Equal(t, "partition 3: gpt: primary header at LBA 1 fails its checksum", nilChecker.Within("partition 3").Fail(m()).Error())
	assert.Equal(t, "disk.img: gpt: primary header at LBA 1 fails its checksum", integrity.Strict("disk.img").Within("").Fail(m()).Error())

	var log integrity.Log
	lenient := integrity.Lenient(&log).Within("disk.img")
	require.True(t, lenient.Within("partition 1").Lenient())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, lenient.Within("partition 1").Fail(m()))
		}()
	}
	wg.Wait()
	assert.NoError(t, lenient.Fail(&integrity.Mismatch{Format: "lvm", Structure: "label in sector 1"}))
	assert.Equal(t, []string{
		"disk.img: lvm: label in sector 1 fails its checksum",
		"disk.img: partition 1: gpt: primary header at LBA 1 fails its checksum",
	}, log.Lines(), "each line once, sorted")
	assert.Equal(t, log.Lines(), lenient.Lines())
}

func TestLogIsBounded(t *testing.T) {
	var log integrity.Log
	c := integrity.Lenient(&log)
	for i := range 1000 {
		require.NoError(t, c.Fail(&integrity.Mismatch{Format: "ext4", Structure: fmt.Sprintf("inode %d", i)}))
	}
	lines := log.Lines()
	require.Len(t, lines, 201)
	assert.Equal(t, "… and 800 more structures that fail their checksums", lines[200])
}
