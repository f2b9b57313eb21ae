package boot

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// genDirNormal, genDirEarly and genDirLate are the directories PID 1
// passes to every generator (argv[1..3]), as image names: the normal one
// ranks after /etc/systemd/system and /run/systemd/system and before the
// vendor directories, the early one before /etc, the late one after all
// (lookup_paths_init).
const (
	genDirNormal = "run/systemd/generator"
	genDirEarly  = "run/systemd/generator.early"
	genDirLate   = "run/systemd/generator.late"
)

// genOut is what the package generators the model runs write under /run,
// served by atBoot as the tmpfs PID 1 has when it loads units: the loader
// then reads generator output through the search path like any unit file,
// .wants link or drop-in, with systemd's precedence.
type genOut struct {
	nodes map[string]*genNode // by image name ("run/systemd/generator/x")
}

// genNode is one file, link or directory of a genOut.
type genNode struct {
	name     string
	mode     fs.FileMode
	data     []byte
	target   string   // links
	children []string // directories, sorted
	// source is the generator that wrote the node, by image path.
	source string
	// assumes is what the model assumed of the machine to write it.
	assumes string
}

func newGenOut() *genOut {
	t := &genOut{nodes: map[string]*genNode{}}
	t.nodes[RunDir] = &genNode{name: RunDir, mode: fs.ModeDir | 0o755}
	return t
}

// mkdirAll is mkdir -p of an image name under /run.
func (t *genOut) mkdirAll(name string) {
	if _, ok := t.nodes[name]; ok || name == "." || name == "" {
		return
	}
	parent := path.Dir(name)
	t.mkdirAll(parent)
	t.nodes[name] = &genNode{name: path.Base(name), mode: fs.ModeDir | 0o755}
	t.link(parent, path.Base(name))
}

func (t *genOut) link(dir, child string) {
	p := t.nodes[dir]
	if i, found := slices.BinarySearch(p.children, child); !found {
		p.children = slices.Insert(p.children, i, child)
	}
}

// add creates the entry name, as open(O_CREAT|O_EXCL) or symlink(2) do:
// false when it exists.
func (t *genOut) add(name string, n *genNode) bool {
	if _, ok := t.nodes[name]; ok {
		return false
	}
	t.mkdirAll(path.Dir(name))
	n.name = path.Base(name)
	t.nodes[name] = n
	t.link(path.Dir(name), n.name)
	return true
}

// symlink is ln -s target dir/base; false when it fails: the entry
// exists, or base is no file name (a "/" in it names a directory that
// does not exist, or it is too long).
func (t *genOut) symlink(target, dir, base, source string) bool {
	if base == "" || strings.Contains(base, "/") || len(base) > 255 {
		return false
	}
	return t.add(dir+"/"+base, &genNode{mode: fs.ModeSymlink | 0o777, target: target, source: source})
}

// writeFile creates or replaces the regular file name, as fopen(…, "w").
func (t *genOut) writeFile(name string, data []byte, source string) {
	if n, ok := t.nodes[name]; ok && n.mode.IsRegular() {
		n.data, n.source = data, source
		return
	}
	t.add(name, &genNode{mode: 0o644, data: data, source: source})
}

// source returns the generator that wrote the image path p ("/run/…").
func (t *genOut) source(p string) string {
	if t == nil {
		return ""
	}
	if n, ok := t.nodes[strings.TrimPrefix(p, "/")]; ok {
		return n.source
	}
	return ""
}

// assumes returns what the model assumed of the machine to write the
// image path p ("/run/…"), "" when nothing.
func (t *genOut) assumes(p string) string {
	if t == nil {
		return ""
	}
	if n, ok := t.nodes[strings.TrimPrefix(p, "/")]; ok {
		return n.assumes
	}
	return ""
}

func (n *genNode) Name() string       { return n.name }
func (n *genNode) Size() int64        { return int64(len(n.data)) }
func (n *genNode) Mode() fs.FileMode  { return n.mode }
func (n *genNode) ModTime() time.Time { return time.Time{} }
func (n *genNode) IsDir() bool        { return n.mode.IsDir() }
func (n *genNode) Sys() any           { return nil }

// genEntry is a genNode as a directory entry.
type genEntry struct{ n *genNode }

func (e genEntry) Name() string               { return e.n.name }
func (e genEntry) IsDir() bool                { return e.n.IsDir() }
func (e genEntry) Type() fs.FileMode          { return e.n.mode.Type() }
func (e genEntry) Info() (fs.FileInfo, error) { return e.n, nil }

// genFileHandle is an open genNode.
type genFileHandle struct {
	n *genNode
	r *bytes.Reader
}

func (f *genFileHandle) Stat() (fs.FileInfo, error) { return f.n, nil }
func (f *genFileHandle) Read(b []byte) (int, error) {
	if f.r == nil {
		return 0, io.EOF
	}
	return f.r.Read(b)
}
func (f *genFileHandle) Close() error { return nil }

func (t *genOut) open(name string) (fs.File, error) {
	n, ok := t.nodes[name]
	if !ok || n.mode&fs.ModeSymlink != 0 {
		return nil, notExist("open", name)
	}
	if n.IsDir() {
		return &genFileHandle{n: n}, nil
	}
	return &genFileHandle{n: n, r: bytes.NewReader(n.data)}, nil
}

func (t *genOut) lstat(name string) (fs.FileInfo, error) {
	if n, ok := t.nodes[name]; ok {
		return n, nil
	}
	return nil, notExist("lstat", name)
}

func (t *genOut) readLink(name string) (string, error) {
	n, ok := t.nodes[name]
	switch {
	case !ok:
		return "", notExist("readlink", name)
	case n.mode&fs.ModeSymlink == 0:
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return n.target, nil
}

func (t *genOut) readDir(name string) ([]fs.DirEntry, error) {
	n, ok := t.nodes[name]
	if !ok || !n.IsDir() {
		return nil, notExist("readdir", name)
	}
	out := make([]fs.DirEntry, len(n.children))
	for i, c := range n.children {
		out[i] = genEntry{t.nodes[name+"/"+c]}
	}
	return out, nil
}

func (t *genOut) readFile(name string) ([]byte, error) {
	n, ok := t.nodes[name]
	if !ok || !n.mode.IsRegular() {
		return nil, notExist("open", name)
	}
	return n.data, nil
}
