package install

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
)

// Errors classified the way install.c branches on errno.
var (
	errNotExist = fs.ErrNotExist                                  // ENOENT
	errNotDir   = errors.New("not a directory")                   // ENOTDIR
	errIsLink   = errors.New("is a symbolic link")                // ELOOP from open(O_NOFOLLOW)
	errTooMany  = errors.New("too many levels of symbolic links") // ELOOP from chase
	errIsDir    = errors.New("is a directory")                    // EISDIR
	errNotReg   = errors.New("not a regular file")                // EBADFD and friends
	errXDev     = errors.New("symlink target name differs")       // EXDEV from install_info_follow
	errNoLink   = errors.New("alias target not found")            // ENOLINK
)

// chaseMax is systemd's CHASE_SYMLINKS_MAX.
const chaseMax = 32

// fsName turns an image-absolute path into an io/fs name.
func fsName(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// joinPath joins an image-absolute directory and a name.
func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// baseName is GNU basename(3): everything after the last slash.
func baseName(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// dirName is the parent of a normalized image-absolute path.
func dirName(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// pathStartsWith ports path_startswith: whether p equals prefix or lies
// below it, component-wise; it returns the rest.
func pathStartsWith(p, prefix string) (string, bool) {
	if isClean(p) && isClean(prefix) {
		switch {
		case p == prefix:
			return "", true
		case prefix == "/" && strings.HasPrefix(p, "/"):
			return p[1:], true
		case strings.HasPrefix(p, prefix) && p[len(prefix)] == '/':
			return p[len(prefix)+1:], true
		}
		return "", false
	}
	pc := splitComponents(p)
	qc := splitComponents(prefix)
	if len(qc) > len(pc) {
		return "", false
	}
	for i := range qc {
		if pc[i] != qc[i] {
			return "", false
		}
	}
	return strings.Join(pc[len(qc):], "/"), true
}

// isClean reports whether p is absolute and normalized: no empty, "." or
// ".." components and no trailing slash.
func isClean(p string) bool {
	if p == "/" {
		return true
	}
	if p == "" || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	// Every component, after its slash, is non-empty and not "." or "..".
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		c := p[i+1:] // non-empty: p does not end in a slash
		switch {
		case c[0] == '/':
			return false
		case c[0] != '.':
		case len(c) == 1 || c[1] == '/':
			return false
		case c[1] == '.' && (len(c) == 2 || c[2] == '/'):
			return false
		}
	}
	return true
}

func splitComponents(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// chase ports chase_symlinks with a root directory: it resolves p
// component by component inside the image, following absolute links from
// the image root and clamping ".." at it. With noFollow the last component
// is not followed (CHASE_NOFOLLOW); with nonexistent a missing component
// ends the walk successfully (CHASE_NONEXISTENT) unless what follows it is
// not plain. The result is normalized and image-absolute.
//
// The image does not change while it is indexed, so results are cached like
// the lstat and readlink answers they derive from: units ask for the same
// few directories (a search directory the image lacks) hundreds of times.
func (x *index) chase(p string, noFollow, nonexistent bool) (string, error) {
	k := chaseKey{p, noFollow, nonexistent}
	if r, ok := x.chased[k]; ok {
		return r.target, r.err
	}
	r, err := x.chaseUncached(p, noFollow, nonexistent)
	if x.chased == nil {
		x.chased = map[chaseKey]linkResult{}
	}
	x.chased[k] = linkResult{r, err}
	return r, err
}

// chaseKey is one chase call's arguments.
type chaseKey struct {
	p                     string
	noFollow, nonexistent bool
}

func (x *index) chaseUncached(p string, noFollow, nonexistent bool) (string, error) {
	done := "/"
	todo := p
	hops := 0
	for {
		todo = strings.TrimLeft(todo, "/")
		if todo == "" {
			return done, nil
		}
		first, rest := todo, ""
		if i := strings.IndexByte(todo, '/'); i >= 0 {
			first, rest = todo[:i], todo[i:]
		}
		todo = rest
		switch first {
		case ".":
			continue
		case "..":
			done = dirName(done)
			continue
		}
		child := joinPath(done, first)
		fi, err := x.lstatRaw(child)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && nonexistent && plainRest(rest) {
				for _, c := range splitComponents(rest) {
					child = joinPath(child, c)
				}
				return child, nil
			}
			return "", err
		}
		last := len(splitComponents(rest)) == 0
		if fi.Mode()&fs.ModeSymlink != 0 && (!noFollow || !last) {
			hops++
			if hops > chaseMax {
				return "", errTooMany
			}
			target, err := x.readlinkRaw(child)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				done = "/"
			}
			todo = target + rest
			if !strings.HasSuffix(target, "/") && rest != "" && !strings.HasPrefix(rest, "/") {
				todo = target + "/" + rest
			}
			continue
		}
		if !last && !fi.IsDir() {
			// The next openat() below a non-directory fails.
			if !onlyDots(rest) {
				return "", errNotDir
			}
		}
		done = child
	}
}

// plainRest reports whether the part after a missing component may be
// appended (path_is_safe: no ".." component; "." and "//" are harmless
// because systemd compares paths component-wise).
func plainRest(rest string) bool {
	for _, c := range strings.Split(rest, "/") {
		if c == ".." {
			return false
		}
	}
	return true
}

func onlyDots(rest string) bool {
	for _, c := range strings.Split(rest, "/") {
		if c != "" && c != "." {
			return false
		}
	}
	return true
}

// lstatRaw describes the entry p whose parents are real directories. The
// image does not change while it is indexed, so answers are cached.
func (x *index) lstatRaw(p string) (fs.FileInfo, error) {
	if r, ok := x.lstats[p]; ok {
		return r.fi, r.err
	}
	fi, err := x.src.Lstat(fsName(p))
	if err != nil {
		err = classify(err)
	}
	x.lstats[p] = lstatResult{fi, err}
	return fi, err
}

type lstatResult struct {
	fi  fs.FileInfo
	err error
}

type linkResult struct {
	target string
	err    error
}

// readlinkRaw reads the link p whose parents are real directories; cached.
func (x *index) readlinkRaw(p string) (string, error) {
	if r, ok := x.links[p]; ok {
		return r.target, r.err
	}
	t, err := x.src.ReadLink(fsName(p))
	if err != nil {
		err = classify(err)
	}
	x.links[p] = linkResult{t, err}
	return t, err
}

// classify maps a Source error onto the errno classes install.c uses.
func classify(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return err
	case errors.Is(err, syscall.ENOTDIR):
		return errNotDir
	}
	return err
}

// lstatPath describes p as lstat(2) would: parents followed inside the
// image, the last component not. It returns the resolved name too.
func (x *index) lstatPath(p string) (string, fs.FileInfo, error) {
	parent, err := x.chase(dirName(p), false, false)
	if err != nil {
		return "", nil, err
	}
	pfi, err := x.lstatRaw(parent)
	if err != nil {
		return "", nil, err
	}
	if !pfi.IsDir() {
		return "", nil, errNotDir
	}
	r := joinPath(parent, baseName(p))
	fi, err := x.lstatRaw(r)
	return r, fi, err
}

// isNullDevice reports whether fi is /dev/null's character device (1:3),
// which systemd's null_or_empty treats like an empty file.
func isNullDevice(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Rdev == 0x103
	}
	return true
}
