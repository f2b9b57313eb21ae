package install

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// loaderDropInsUnfiltered is loaderDropIns without the dropInKey filter:
// every name unit_file_find_dirs builds is looked up in every search dir.
func (x *index) loaderDropInsUnfiltered(name string, aliases []string) []string {
	var dirs, cands []string
	for _, n := range append([]string{name}, aliases...) {
		cands = unit.DropInDirs(cands[:0], n, ".d")
		for _, sd := range x.search {
			for _, d := range cands {
				dirs = x.appendDirIn(dirs, sd, d)
			}
		}
	}
	t := nameType(name)
	for _, sd := range x.search {
		dirs = x.appendDirIn(dirs, sd, t+".d")
	}
	_, shown := x.confFiles(dirs, ".conf")
	return shown
}

// TestDropInKeyFilterIsExact checks that skipping the units whose
// dropInKey no .d entry has never loses a drop-in: on the random trees and
// the Debian root, for every listed unit and every name a drop-in dir of
// the tree is named for, alone and with aliases.
func TestDropInKeyFilterIsExact(t *testing.T) {
	check := func(t *testing.T, dir string, names []string) int {
		src, err := rootfs.OpenDir(dir)
		require.NoError(t, err)
		defer src.Close()
		fsys := rootfs.New(src)
		us, err := List(fsys, 0)
		require.NoError(t, err)
		for _, u := range us {
			names = append(names, u.Name)
		}
		x := newIndex(fsys, version.Default)
		found := 0
		for _, n := range names {
			if !nameIsValid(n, nameAny) {
				continue
			}
			for _, aliases := range [][]string{nil, names[:min(3, len(names))]} {
				got := x.loaderDropIns(n, aliases)
				want := x.loaderDropInsUnfiltered(n, aliases)
				require.Equal(t, want, got, "%s: %s with aliases %v", dir, n, aliases)
				if len(want) > 0 {
					found++
				}
			}
		}
		return found
	}
	found := 0
	for seed := range uint64(60) {
		dir := t.TempDir()
		spec := genTree(seed)
		writeTree(t, dir, spec)
		// The names the tree's drop-in dirs are for, found or not.
		var names []string
		for p := range spec {
			for _, c := range strings.Split(p, "/") {
				if n, ok := strings.CutSuffix(c, ".d"); ok {
					names = append(names, n)
				}
			}
		}
		found += check(t, dir, names)
	}
	found += check(t, testenv.Bookworm.Path(t), []string{"user@1000.service", "user-1000.slice", "sshd-keygen@rsa.service", "a-b-c@i.service"})
	assert.Positive(t, found, "no unit had drop-ins: the comparison proved nothing")
}
