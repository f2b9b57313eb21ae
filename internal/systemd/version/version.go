// Package version reads which systemd an image ships, so the unit model can
// behave as that version does: from the name of the image's
// libsystemd-shared library (every systemd since 231 links its binaries
// against libsystemd-shared-VERSION.so, in /usr/lib/systemd,
// /lib/systemd, /usr/lib64/systemd or /usr/lib/TRIPLET/systemd), then from
// the dpkg database (the systemd package's Version:). It reads the image only
// through a rootfs view, never the host, and never writes.
//
// An image that names no systemd (a container base, a distribution
// without systemd) is modelled as [Default], and [Info.Source] says so.
package version

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// Default is the version the model follows when an image does not say
// which systemd it ships: systemd 252, the version of Debian 12, RHEL 9
// and Amazon Linux 2023.
const Default = 252

// Oldest and Newest bound the versions an override may name: every systemd
// with libsystemd-shared (231) up to a generous future.
const (
	Oldest = 231
	Newest = 999
)

// Where a version came from, when not from an image path.
const (
	// SourceDefault: the image names no systemd; Default is assumed.
	SourceDefault = "default"
	// SourceOverride: the user named the version (--systemd-version).
	SourceOverride = "override"
)

// Info is the systemd version the model follows for one image.
type Info struct {
	// Major is the version number systemd's own behaviour changes with
	// (252, 257).
	Major int `json:"version"`
	// Full is the version as the image spells it, when it says more than
	// the number ("252.39-1~deb12u2" from dpkg, "254.5-2.fc39" from a
	// library name); "" otherwise.
	Full string `json:"version_full,omitempty"`
	// Source is where it came from: the image path of the library or of
	// the package database read, SourceOverride, or SourceDefault.
	Source string `json:"source"`
}

// AtLeast reports whether the version is v or later.
func (i Info) AtLeast(v int) bool { return i.Major >= v }

// String is "systemd 252 (/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so)".
func (i Info) String() string {
	v := strconv.Itoa(i.Major)
	if i.Full != "" && i.Full != v {
		v += " (" + i.Full + ")"
	}
	return "systemd " + v + " from " + i.Source
}

// Override is the Info of a version the user names; it fails unless s is a
// version number between Oldest and Newest.
func Override(s string) (Info, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < Oldest || n > Newest {
		return Info{}, fmt.Errorf("systemd version %q: want a number from %d to %d, like 252", s, Oldest, Newest)
	}
	return Info{Major: n, Source: SourceOverride}, nil
}

// libDirs are the directories systemd's build installs libsystemd-shared
// into (its pkglibdir, the rootlibexecdir of split-/usr builds), relative
// to the image root; usr/lib/TRIPLET/systemd is searched as well.
var libDirs = []string{"usr/lib/systemd", "lib/systemd", "usr/lib64/systemd", "lib64/systemd"}

// statusFile is dpkg's database of installed packages.
const statusFile = "var/lib/dpkg/status"

// Detect returns the systemd version fsys ships: the newest
// libsystemd-shared in the image, then the dpkg database's systemd
// package, then Default. It fails only when the image cannot be read (an
// I/O error of a corrupt image); a missing or unparseable file is only a
// source less.
func Detect(fsys *rootfs.FS) (Info, error) {
	// The two sources are independent reads (a remote image's round trips
	// overlap); the library's error is reported first.
	var pkg Info
	var pkgErr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		pkg, pkgErr = fromDpkg(fsys)
	}()
	lib, err := fromLibrary(fsys)
	<-read
	if err != nil {
		return Info{}, err
	}
	if pkgErr != nil {
		return Info{}, pkgErr
	}
	switch {
	case lib.Major != 0:
		// dpkg spells the full version of the same build better than a
		// library named by its number alone.
		if pkg.Major == lib.Major && lib.Full == "" {
			lib.Full = pkg.Full
		}
		return lib, nil
	case pkg.Major != 0:
		return pkg, nil
	}
	return Info{Major: Default, Source: SourceDefault}, nil
}

// absent reports errors that only mean a path is not there to read.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) ||
		errors.Is(err, rootfs.ErrMasked) || errors.Is(err, rootfs.ErrTooManyLinks) ||
		errors.Is(err, fs.ErrInvalid)
}

// fromLibrary finds libsystemd-shared-VERSION.so in the library
// directories; the newest wins when an upgrade left an older one behind.
func fromLibrary(fsys *rootfs.FS) (Info, error) {
	dirs := slices.Clone(libDirs)
	ents, err := fsys.ReadDir("usr/lib")
	if err != nil && !absent(err) {
		return Info{}, fmt.Errorf("read /usr/lib: %w", err)
	}
	for _, e := range ents {
		// Multiarch triplets: x86_64-linux-gnu, aarch64-linux-gnu, ...
		if strings.Contains(e.Name(), "-linux-") {
			dirs = append(dirs, "usr/lib/"+e.Name()+"/systemd")
		}
	}
	// Each directory is resolved and listed on its own (a remote image's
	// round trips overlap); the results are taken in order.
	type listing struct {
		real       string
		resolveErr error
		ents       []fs.DirEntry
		err        error
	}
	got := make([]listing, len(dirs))
	rootfs.ForEach(len(dirs), func(i int) {
		l := &got[i]
		if l.real, l.resolveErr = fsys.Resolve(dirs[i]); l.resolveErr == nil {
			l.ents, l.err = fsys.ReadDir(dirs[i])
		}
	})
	var best Info
	seen := map[string]bool{}
	for i, d := range dirs {
		real, err := got[i].real, got[i].resolveErr
		if err != nil || seen[real] {
			if err != nil && !absent(err) {
				return Info{}, fmt.Errorf("resolve /%s: %w", d, err)
			}
			continue
		}
		seen[real] = true
		ents, err := got[i].ents, got[i].err
		if err != nil {
			if absent(err) {
				continue
			}
			return Info{}, fmt.Errorf("read /%s: %w", d, err)
		}
		for _, e := range ents {
			major, full, ok := parseLibName(e.Name())
			if ok && major > best.Major {
				best = Info{Major: major, Full: full, Source: "/" + path.Join(d, e.Name())}
			}
		}
	}
	return best, nil
}

// parseLibName reads "libsystemd-shared-252.so" (major 252) and
// "libsystemd-shared-254.5-2.fc39.so" (major 254, full "254.5-2.fc39").
func parseLibName(name string) (major int, full string, ok bool) {
	rest, ok := strings.CutPrefix(name, "libsystemd-shared-")
	if !ok {
		return 0, "", false
	}
	rest, ok = strings.CutSuffix(rest, ".so")
	if !ok || rest == "" {
		return 0, "", false
	}
	major, ok = leadingNumber(rest)
	if !ok {
		return 0, "", false
	}
	if rest != strconv.Itoa(major) {
		full = rest
	}
	return major, full, true
}

// leadingNumber parses the digits a version starts with, within the
// bounds of a real systemd version.
func leadingNumber(s string) (int, bool) {
	i := 0
	for i < len(s) && i < 4 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i < len(s) && s[i] >= '0' && s[i] <= '9' {
		return 0, false
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || n < 1 || n > Newest {
		return 0, false
	}
	return n, true
}

// dpkgPackages are the packages whose version is systemd's, in preference.
var dpkgPackages = []string{"systemd", "libsystemd-shared"}

// fromDpkg reads the installed version of the systemd package from dpkg's
// status file, one paragraph at a time.
func fromDpkg(fsys *rootfs.FS) (Info, error) {
	f, err := fsys.Open(statusFile)
	if err != nil {
		if absent(err) || errors.Is(err, tarfs.ErrNotKept) {
			return Info{}, nil // a tarball read from a stream may not keep it
		}
		return Info{}, fmt.Errorf("open /%s: %w", statusFile, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Info{}, nil
	}
	found := map[string]string{}
	var pkg, ver, status string
	flush := func() {
		if pkg != "" && ver != "" && strings.HasSuffix(status, " installed") {
			found[pkg] = ver
		}
		pkg, ver, status = "", "", ""
	}
	sc := bufio.NewScanner(io.LimitReader(f, rootfs.MaxReadFile))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	field := func(l []byte, name string) (string, bool) {
		if len(l) < len(name) || string(l[:len(name)]) != name {
			return "", false
		}
		return string(bytes.TrimSpace(l[len(name):])), true
	}
	for sc.Scan() {
		// Bytes, not Text: only the three fields read become strings (a
		// Debian status file has thousands of lines).
		l := sc.Bytes()
		if len(l) == 0 {
			flush()
			continue
		}
		if v, ok := field(l, "Package:"); ok {
			pkg = v
		} else if v, ok := field(l, "Version:"); ok {
			ver = v
		} else if v, ok := field(l, "Status:"); ok {
			status = v
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Info{}, nil // not a status file dpkg could read either
		}
		return Info{}, fmt.Errorf("read /%s: %w", statusFile, err)
	}
	flush()
	for _, p := range dpkgPackages {
		v, ok := found[p]
		if !ok {
			continue
		}
		upstream := v
		if i := strings.IndexByte(upstream, ':'); i >= 0 {
			upstream = upstream[i+1:] // the epoch
		}
		if major, ok := leadingNumber(upstream); ok {
			return Info{Major: major, Full: v, Source: "/" + statusFile}, nil
		}
	}
	return Info{}, nil
}
