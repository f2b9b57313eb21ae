package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// leftovers lists every entry below dir a fix may leave.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), leftoverPrefix) {
			out = append(out, p)
		}
		return nil
	}))
	return out
}

// crashTree is a tree whose plan exercises every op: links removed and
// their emptied directory with them, a mask, a directory made, a drop-in
// written over an old one and a new one.
func crashTree(t *testing.T) (string, *Plan) {
	t.Helper()
	dir := t.TempDir()
	unit := "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
	build(t, dir, []entry{
		{"lib/systemd/system/a.service", 'f', unit},
		{"lib/systemd/system/b.service", 'f', unit},
		{"lib/systemd/system/c.service", 'f', unit},
		{"etc/systemd/system/multi-user.target.wants/a.service", 'l', "/lib/systemd/system/a.service"},
		{"etc/systemd/system/multi-user.target.wants/b.service", 'l', "/lib/systemd/system/b.service"},
		{"etc/systemd/system/timers.target.wants/c.service", 'l', "/lib/systemd/system/c.service"},
		{"etc/systemd/system/c.service.d/old.conf", 'f', "[Service]\nUser=old\n"},
		{"etc/systemd/system/keep.conf", 'f', "untouched\n"},
	})
	p := &Plan{Changes: []Change{
		{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/a.service"},
		{Op: OpUnlink, Path: "/etc/systemd/system/timers.target.wants/c.service"},
		{Op: OpRmdir, Path: "/etc/systemd/system/timers.target.wants"},
		{Op: OpSymlink, Path: "/etc/systemd/system/b.service", Target: "/dev/null"},
		{Op: OpMkdir, Path: "/etc/systemd/system/a.service.d"},
		{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/harden.conf", Content: "[Service]\nProtectSystem=strict\n"},
		{Op: OpWrite, Path: "/etc/systemd/system/c.service.d/old.conf", Content: "[Service]\nUser=new\n", Mode: 0o600},
	}}
	return dir, p
}

// TestApplyCrashAtEveryStep stops Apply, as a SIGKILL would (no clean-up),
// before each of its writes in turn: /etc/systemd/system is then exactly
// as before or exactly as planned, and the next Open removes what the
// stopped run left, after which Apply completes the plan.
func TestApplyCrashAtEveryStep(t *testing.T) {
	base, p := crashTree(t)
	before := snapshot(t, filepath.Join(base, "etc/systemd/system"))
	ref := t.TempDir()
	require.NoError(t, os.CopyFS(ref, os.DirFS(base)))
	require.NoError(t, Apply(ref, p))
	after := snapshot(t, filepath.Join(ref, "etc/systemd/system"))
	require.NotEqual(t, before, after)
	assert.Equal(t, "file -rw------- \"[Service]\\nUser=new\\n\"", after["c.service.d/old.conf"])
	assert.Equal(t, "link -> /dev/null", after["b.service"])

	seen := map[string]int{}
	for k := 0; ; k++ {
		dir := t.TempDir()
		require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
		tr, err := Open(dir)
		require.NoError(t, err)
		n := 0
		var at string
		tr.crash = func(step string) error {
			if n == k {
				at = step
				return errCrash
			}
			n++
			return nil
		}
		err = tr.Apply(p)
		require.NoError(t, tr.Close())
		got := snapshot(t, filepath.Join(dir, "etc/systemd/system"))
		if err == nil {
			assert.Equal(t, after, got)
			require.Greater(t, k, 10, "the crash points cover the copy, the changes and the swap")
			break
		}
		require.ErrorIs(t, err, errCrash)
		switch {
		case equalMaps(got, before):
			seen["before"]++
		case equalMaps(got, after):
			seen["after"]++
		default:
			t.Fatalf("crash before %q (step %d) left a mixed tree:\n%v", at, k, got)
		}
		left := leftovers(t, dir)
		if k > 0 {
			require.NotEmpty(t, left, "crash at %q leaves its copy or old tree", at)
		}
		tr, err = Open(dir)
		require.NoError(t, err)
		assert.Len(t, tr.Removed, len(left))
		assert.Empty(t, leftovers(t, dir), "Open removes what the crash at %q left", at)
		require.NoError(t, tr.Apply(p))
		require.NoError(t, tr.Close())
		assert.Equal(t, after, snapshot(t, filepath.Join(dir, "etc/systemd/system")))
		assert.Empty(t, leftovers(t, dir))
	}
	assert.Positive(t, seen["before"])
	assert.Equal(t, 1, seen["after"], "only a crash after the swap leaves the planned tree")
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestApplyKeepsWhatItDoesNotChange: the swapped directory keeps every
// unchanged entry's inode (files and links are hard links, not copies)
// and every directory's mode, owner, extended attributes and mtime.
func TestApplyKeepsWhatItDoesNotChange(t *testing.T) {
	dir, p := crashTree(t)
	etc := filepath.Join(dir, "etc/systemd/system")
	sub := filepath.Join(etc, "c.service.d")
	require.NoError(t, os.Chmod(sub, fs.ModeSetgid|0o750))
	require.NoError(t, os.Chown(sub, 4242, 4343))
	xattr := unix.Setxattr(sub, "user.amilint-test", []byte("kept"), 0)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(etc, "multi-user.target.wants"), mtime, mtime))
	ino := func(p string) uint64 {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	keep, link := ino(filepath.Join(etc, "keep.conf")), ino(filepath.Join(etc, "multi-user.target.wants/b.service"))

	// Only what the plan touches changes: drop the change inside
	// multi-user.target.wants, so its mtime must survive.
	var cs []Change
	for _, c := range p.Changes {
		if !strings.Contains(c.Path, "multi-user.target.wants") {
			cs = append(cs, c)
		}
	}
	require.NoError(t, Apply(dir, &Plan{Changes: cs}))
	assert.Equal(t, keep, ino(filepath.Join(etc, "keep.conf")), "unchanged files keep their inode")
	assert.Equal(t, link, ino(filepath.Join(etc, "multi-user.target.wants/b.service")), "unchanged links keep their inode")
	fi, err := os.Lstat(sub)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDir|fs.ModeSetgid|0o750, fi.Mode())
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, [2]uint32{4242, 4343}, [2]uint32{st.Uid, st.Gid})
	if xattr == nil {
		v := make([]byte, 16)
		n, err := unix.Getxattr(sub, "user.amilint-test", v)
		require.NoError(t, err)
		assert.Equal(t, "kept", string(v[:n]))
	} else {
		t.Logf("no user xattrs on this filesystem: %v", xattr)
	}
	fi, err = os.Stat(filepath.Join(etc, "multi-user.target.wants"))
	require.NoError(t, err)
	assert.True(t, fi.ModTime().Equal(mtime), "an untouched directory keeps its mtime: %v", fi.ModTime())
	assert.Empty(t, leftovers(t, dir))
}

// TestApplyRefusals: a plan that would write outside /etc, or through a
// link inside the swapped directory, or over a link standing for it, is
// refused before anything changes.
func TestApplyRefusals(t *testing.T) {
	t.Run("outside /etc", func(t *testing.T) {
		dir, _ := crashTree(t)
		before := snapshot(t, dir)
		err := Apply(dir, &Plan{Changes: []Change{{Op: OpSymlink, Path: "/usr/lib/systemd/system/x.service", Target: "/dev/null"}}})
		require.ErrorIs(t, err, ErrOutsideConfig)
		assert.Equal(t, before, snapshot(t, dir))
	})
	t.Run("link inside the swapped directory", func(t *testing.T) {
		dir, _ := crashTree(t)
		// c.service.d/../system-ish escape: a relative link from the copy
		// would lead into the original.
		require.NoError(t, os.Symlink("../system/c.service.d", filepath.Join(dir, "etc/systemd/system/d.service.d")))
		before := snapshot(t, dir)
		err := Apply(dir, &Plan{Changes: []Change{{Op: OpWrite, Path: "/etc/systemd/system/d.service.d/x.conf", Content: "x"}}})
		require.ErrorIs(t, err, ErrUnsafePath)
		assert.Equal(t, before, snapshot(t, dir))
		assert.Empty(t, leftovers(t, dir))
	})
	t.Run("the directory is a link", func(t *testing.T) {
		dir := t.TempDir()
		build(t, dir, []entry{{"usr/etc-systemd/a.service", 'f', "[Service]\n"}, {"etc/systemd/system", 'l', "../../usr/etc-systemd"}})
		err := Apply(dir, &Plan{Changes: []Change{{Op: OpSymlink, Path: "/etc/systemd/system/b.service", Target: "/dev/null"}}})
		require.ErrorIs(t, err, ErrUnsafePath)
		assert.Empty(t, leftovers(t, dir))
	})
	t.Run("a write over a directory", func(t *testing.T) {
		dir, _ := crashTree(t)
		before := snapshot(t, dir)
		err := Apply(dir, &Plan{Changes: []Change{
			{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/a.service"},
			{Op: OpWrite, Path: "/etc/systemd/system/c.service.d", Content: "x"},
		}})
		require.ErrorIs(t, err, fs.ErrExist)
		assert.Equal(t, before, snapshot(t, dir), "the first change is not kept either")
		assert.Empty(t, leftovers(t, dir))
	})
}

// TestWriteIsIdempotent: writing the same drop-in twice changes nothing
// the second time (the file keeps its inode).
func TestWriteIsIdempotent(t *testing.T) {
	dir, _ := crashTree(t)
	p := &Plan{Changes: []Change{{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/x.conf", Content: "[Service]\n"}, {Op: OpMkdir, Path: "/etc/systemd/system/a.service.d"}}}
	// The mkdir comes first in a real plan.
	p.Changes[0], p.Changes[1] = p.Changes[1], p.Changes[0]
	require.NoError(t, Apply(dir, p))
	f := filepath.Join(dir, "etc/systemd/system/a.service.d/x.conf")
	fi1, err := os.Stat(f)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), fi1.Mode().Perm())
	require.NoError(t, Apply(dir, p))
	fi2, err := os.Stat(f)
	require.NoError(t, err)
	assert.True(t, os.SameFile(fi1, fi2))
}

// TestWriteOverASparseFile: a file already where a drop-in goes is read
// only when it has the drop-in's size; a sparse file of a terabyte there
// was read whole before it was replaced.
func TestWriteOverASparseFile(t *testing.T) {
	dir, _ := crashTree(t)
	f := filepath.Join(dir, "etc/systemd/system/a.service.d/x.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
	h, err := os.Create(f)
	require.NoError(t, err)
	require.NoError(t, h.Truncate(1<<40))
	require.NoError(t, h.Close())
	done := make(chan error, 1)
	go func() {
		done <- Apply(dir, &Plan{Changes: []Change{{Op: OpWrite, Path: "/etc/systemd/system/a.service.d/x.conf", Content: "[Service]\n"}}})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("still reading the sparse file a minute later")
	}
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	assert.Equal(t, "[Service]\n", string(b))
}

// TestOpenRemovesLeftoversAndLocks: Open removes the copies and old trees
// of killed runs and the temporary links older versions made, and a
// second Open of the same directory fails while the first holds it.
func TestOpenRemovesLeftoversAndLocks(t *testing.T) {
	dir, _ := crashTree(t)
	build(t, dir, []entry{
		{"etc/systemd/" + leftoverPrefix + "0123456789abcdef/a.service", 'l', "/dev/null"},
		{"etc/" + leftoverPrefix + "feed/systemd/system/x", 'f', "x"},
		{"etc/systemd/system/multi-user.target.wants/" + leftoverPrefix + "89abcdef01234567", 'l', "/lib/systemd/system/a.service"},
	})
	before := snapshot(t, dir)
	tr, err := Open(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"/etc/systemd/" + leftoverPrefix + "0123456789abcdef",
		"/etc/" + leftoverPrefix + "feed",
		"/etc/systemd/system/multi-user.target.wants/" + leftoverPrefix + "89abcdef01234567",
	}, tr.Removed)
	assert.Empty(t, leftovers(t, dir))
	assert.Len(t, snapshot(t, dir), len(before)-7, "only the leftovers and what they held went")

	_, err = Open(dir)
	assert.ErrorIs(t, err, ErrBusy)
	require.NoError(t, tr.Close())
	tr, err = Open(dir)
	require.NoError(t, err)
	require.NoError(t, tr.Close())
}

func TestChangeString(t *testing.T) {
	for c, want := range map[Change]string{
		{Op: OpUnlink, Path: "/a"}:                "rm /a",
		{Op: OpSymlink, Path: "/a", Target: "/b"}: "ln -s /b /a",
		{Op: OpRmdir, Path: "/a"}:                 "rmdir /a",
		{Op: OpMkdir, Path: "/a"}:                 "mkdir /a",
		{Op: OpWrite, Path: "/a", Content: "abc"}: "write /a (3 bytes)",
		{Op: "chmod", Path: "/a"}:                 "chmod /a",
	} {
		assert.Equal(t, want, c.String(), fmt.Sprint(c))
	}
	assert.True(t, errors.Is(fmt.Errorf("x: %w", ErrBusy), ErrBusy))
}
