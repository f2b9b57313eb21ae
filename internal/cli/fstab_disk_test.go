package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/ebs/ebstest"
)

const (
	rootUUID    = "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"
	scratchUUID = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"
)

// fstabTree is the DLAMI fixture with systemd-fstab-generator and an fstab
// naming the root filesystem by its own UUID and label, the root partition
// by its PARTLABEL, and a scratch volume formatted during the build that
// is on no disk of the image.
func fstabTree(t *testing.T) string {
	t.Helper()
	dir := materialize(t, "dlami")
	gen := filepath.Join(dir, "lib/systemd/system-generators/systemd-fstab-generator")
	require.NoError(t, os.MkdirAll(filepath.Dir(gen), 0o755))
	require.NoError(t, os.WriteFile(gen, []byte("\x7fELF"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/fstab"), []byte(
		"UUID="+rootUUID+"\t/\text4\tdiscard,errors=remount-ro\t0 1\n"+
			"LABEL=cloudimg-rootfs /srv ext4 defaults 0 2\n"+
			"PARTLABEL=root /mnt ext4 defaults 0 2\n"+
			"UUID="+scratchUUID+" /data ext4 defaults 0 2\n"), 0o644))
	return dir
}

// rootImage is an ext4 image of dir with the root's UUID and label.
func rootImage(t *testing.T, dir string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "root.ext4")
	disktest.Run(t, "mke2fs", "-q", "-F", "-t", "ext4", "-U", rootUUID, "-L", "cloudimg-rootfs", "-E", "root_owner=0:0", "-d", dir, img, "40M")
	return img
}

func mountFindings(rep *finding.Report) []finding.Finding {
	var got []finding.Finding
	for _, f := range rep.Findings {
		if f.RuleID == "boot-mount-instance-device" {
			got = append(got, f)
		}
	}
	return got
}

// TestScanFstabFilesystemNotOnDisk builds a GPT disk image (raw and
// qcow2) of a tree whose fstab names a filesystem the disk does not have:
// the scan of the image finds it, and only it (the root's own UUID, label
// and PARTLABEL are on the disk); the scan of the tree as a directory,
// whose disk amilint cannot see, judges none of them.
func TestScanFstabFilesystemNotOnDisk(t *testing.T) {
	dir := fstabTree(t)
	raw := disktest.GPTRoot(t, rootImage(t, dir))
	for name, img := range map[string]string{"raw gpt": raw, "qcow2": disktest.Convert(t, raw, "qcow2")} {
		t.Run(name, func(t *testing.T) {
			code, rep, stderr := scanJSON(t, img)
			require.Equal(t, ExitFindings, code, stderr)
			got := mountFindings(rep)
			require.Len(t, got, 1, "findings: %v", rep.Findings)
			f := got[0]
			assert.Equal(t, "data.mount", f.Unit)
			assert.Equal(t, "high", f.Severity.String())
			assert.Contains(t, f.Message, "data.mount mounts /dev/disk/by-uuid/"+scratchUUID+", a filesystem on no volume of the image's disk")
			assert.Contains(t, f.Message, rootUUID+" (partition 2)")
			assert.Contains(t, f.Message, "(an /etc/fstab entry without nofail)")
			assert.Equal(t, "/data", f.Evidence["where"])
		})
	}

	code, rep, stderr := scanJSON(t, dir)
	require.NotEqual(t, ExitError, code, stderr)
	assert.Empty(t, mountFindings(rep), "a directory's disk is unknown")

	// The facts say what the disk has, as udev names it.
	code, out, stderr := runCLI(t, "facts", raw)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Image struct {
			Disk *struct {
				Volumes      []map[string]string
				OtherVolumes []string `json:"other_volumes"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	d := doc.Image.Disk
	require.NotNil(t, d, "a disk image target has image.disk")
	assert.Empty(t, d.OtherVolumes)
	require.Len(t, d.Volumes, 3)
	assert.Equal(t, "partition 2", d.Volumes[1]["where"])
	assert.Equal(t, "ext4", d.Volumes[1]["type"])
	assert.Equal(t, rootUUID, d.Volumes[1]["uuid"])
	assert.Equal(t, "cloudimg-rootfs", d.Volumes[1]["label"])
	assert.Equal(t, "root", d.Volumes[1]["partlabel"])
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, d.Volumes[1]["partuuid"])
	assert.Equal(t, "EFI", d.Volumes[0]["partlabel"])
	code, out, stderr = runCLI(t, "facts", dir)
	require.Equal(t, ExitOK, code, stderr)
	assert.NotContains(t, out, `"disk"`)
}

// TestScanAMIWithOtherVolumes: an AMI whose block device mapping holds
// another EBS snapshot boots with filesystems amilint does not read, so a
// filesystem missing from the root's disk is not judged; the same AMI
// without it is.
func TestScanAMIWithOtherVolumes(t *testing.T) {
	data, err := os.ReadFile(disktest.GPTRoot(t, rootImage(t, fstabTree(t))))
	require.NoError(t, err)
	srv := &ebstest.Server{
		Snapshots: map[string]ebstest.Snapshot{"snap-root": {Data: data}},
		Images: map[string]ebstest.Image{
			"ami-0alone": {RootDevice: "/dev/xvda", SnapshotID: "snap-root", Others: map[string]string{"/dev/sdb": "ephemeral0"}},
			"ami-0data":  {RootDevice: "/dev/xvda", SnapshotID: "snap-root", Others: map[string]string{"/dev/sdf": "snap-data"}},
		},
	}
	url := srv.Start()
	defer srv.Close()
	ebstest.UseEndpoint(t, url)

	code, rep, stderr := scanJSON(t, "ami:ami-0alone")
	require.Equal(t, ExitFindings, code, stderr)
	got := mountFindings(rep)
	require.Len(t, got, 1, "findings: %v", rep.Findings)
	assert.Equal(t, "data.mount", got[0].Unit)
	assert.Contains(t, got[0].Message, rootUUID+" (partition 2)")

	_, rep, stderr = scanJSON(t, "ami:ami-0data")
	require.NotNil(t, rep, stderr)
	assert.Empty(t, mountFindings(rep))
	code, out, stderr := runCLI(t, "facts", "ami:ami-0data")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, `"/dev/sdf snap-data"`)
}
