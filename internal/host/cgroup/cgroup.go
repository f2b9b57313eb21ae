// Package cgroup owns the health of a running host's memory cgroups: how
// many memory cgroups the kernel still tracks against how many exist in
// cgroupfs (the difference are "zombie" or dying memcgs, kept alive by
// charged page cache), and, on the unified (v2) hierarchy, which subtree
// holds the dying descendants.
//
// It reads only /proc/cgroups, a mountinfo file, directory listings of the
// cgroup hierarchies and cgroup.stat files. It never reads memory.stat or
// any other per-memcg statistics file: walking those is exactly the
// kernel work (mem_cgroup_nr_lru_pages) that made the incident's kubelet
// saturate a core, and the auditor must not become that kubelet.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Memory is the memory controller's count of cgroups.
type Memory struct {
	// Version is the cgroup version the memory controller is bound to: 1 or 2.
	Version int `json:"version"`
	// Hierarchy is the mount point of the memory controller's hierarchy.
	Hierarchy string `json:"hierarchy"`
	// Tracked is the kernel's count of memory cgroups (/proc/cgroups
	// num_cgroups), live and dying.
	Tracked int `json:"tracked"`
	// Present is the number of directories in the hierarchy, its root included.
	Present int `json:"present"`
	// Zombies is the number of memory cgroups removed from cgroupfs but
	// still tracked: Tracked - Present on v1, the root's
	// nr_dying_descendants on v2. Inside a cgroup namespace (a container)
	// the v1 figure also counts the host's memory cgroups outside it:
	// /proc/cgroups is the kernel's, the directories are the namespace's
	// (in e2e-live the container sees 19 of the host's 26 directories).
	Zombies int `json:"zombies"`
}

// Subtree is one cgroup of the unified hierarchy with dying descendants.
type Subtree struct {
	// Path is relative to the hierarchy's root ("system.slice/ecs.service").
	Path        string `json:"path"`
	Dying       int    `json:"dying"`
	Descendants int    `json:"descendants"`
}

// Unified is the state of the cgroup v2 hierarchy.
type Unified struct {
	Mount string `json:"mount"`
	// Dying is the root's nr_dying_descendants.
	Dying int `json:"dying"`
	// Subtrees are the cgroups with dying descendants, most first.
	Subtrees []Subtree `json:"subtrees,omitempty"`
	// Leaking names the deepest subtree that holds at least half of its
	// parent's dying descendants, starting from the root: the slice or
	// service that leaks. Empty when nothing is dying.
	Leaking string `json:"leaking,omitempty"`
}

// Health is one reading of the host's cgroups.
type Health struct {
	// Memory is nil when the kernel has no memory controller enabled.
	Memory *Memory `json:"memory,omitempty"`
	// Unified is nil when no cgroup2 hierarchy is mounted.
	Unified *Unified `json:"unified,omitempty"`
}

// Reader reads cgroup health from a file tree laid out like a host's root
// ("proc/cgroups", "sys/fs/cgroup/..."). Paths from mountinfo are taken
// relative to the same tree.
type Reader struct {
	// FS is the host's root, or a copy of its relevant parts.
	FS fs.FS
	// MountInfo is the mountinfo file to find hierarchies in, relative to
	// FS; "proc/self/mountinfo" when empty. A container auditing its host
	// with hostPID uses "proc/1/mountinfo".
	MountInfo string
}

// NewReader returns a Reader over the directory root ("/" for this host).
func NewReader(root string) *Reader {
	if root == "" {
		root = "/"
	}
	return &Reader{FS: os.DirFS(root)}
}

// Mount is one cgroup hierarchy from mountinfo.
type Mount struct {
	// Point is the mount point, absolute as mountinfo spells it.
	Point string
	// Version is 1 for "cgroup", 2 for "cgroup2".
	Version int
	// Controllers are the v1 controllers bound to it (from super options).
	Controllers []string
}

// ErrCorrupt marks a proc file that does not parse.
var ErrCorrupt = errors.New("corrupt")

// Read takes one reading.
func (r *Reader) Read() (*Health, error) {
	mi := r.MountInfo
	if mi == "" {
		mi = "proc/self/mountinfo"
	}
	b, err := fs.ReadFile(r.FS, mi)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", mi, err)
	}
	mounts, err := ParseMountInfo(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", mi, err)
	}
	b, err = fs.ReadFile(r.FS, "proc/cgroups")
	if err != nil {
		return nil, fmt.Errorf("read proc/cgroups: %w", err)
	}
	ctrls, err := ParseCgroups(b)
	if err != nil {
		return nil, fmt.Errorf("parse proc/cgroups: %w", err)
	}
	h := &Health{}
	var v2 *Mount
	for i := range mounts {
		if mounts[i].Version == 2 {
			v2 = &mounts[i]
			break
		}
	}
	if v2 != nil {
		u, err := r.readUnified(v2.Point)
		if err != nil {
			return nil, err
		}
		h.Unified = u
	}
	mem, ok := ctrls["memory"]
	if !ok || !mem.Enabled {
		return h, nil
	}
	m := &Memory{Tracked: mem.NumCgroups}
	if mem.Hierarchy == 0 {
		if v2 == nil {
			return nil, fmt.Errorf("memory controller on cgroup v2 but no cgroup2 mount in %s", mi)
		}
		m.Version, m.Hierarchy, m.Zombies = 2, v2.Point, h.Unified.Dying
		if m.Present, err = r.countDirs(v2.Point); err != nil {
			return nil, err
		}
	} else {
		var v1 *Mount
		for i := range mounts {
			if mounts[i].Version == 1 && slices.Contains(mounts[i].Controllers, "memory") {
				v1 = &mounts[i]
				break
			}
		}
		if v1 == nil {
			return nil, fmt.Errorf("memory controller on hierarchy %d but not mounted in %s", mem.Hierarchy, mi)
		}
		m.Version, m.Hierarchy = 1, v1.Point
		if m.Present, err = r.countDirs(v1.Point); err != nil {
			return nil, err
		}
		m.Zombies = max(0, m.Tracked-m.Present)
	}
	h.Memory = m
	return h, nil
}

// fsName converts an absolute host path to a name in r.FS.
func fsName(p string) string {
	p = strings.TrimLeft(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// countDirs counts the directories under dir, dir included, from
// directory listings alone (no stat, no file opened).
func (r *Reader) countDirs(dir string) (int, error) {
	n := 0
	stack := []string{fsName(dir)}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n++
		ents, err := fs.ReadDir(r.FS, d)
		if err != nil {
			if removed(err) && n > 1 {
				continue // removed while walking
			}
			return 0, fmt.Errorf("count cgroups in %s: %w", d, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				stack = append(stack, d+"/"+e.Name())
			}
		}
	}
	return n, nil
}

// removed says whether err is what reading a cgroup removed while it was
// being walked gives: the name gone (ENOENT), or, opened just before the
// rmdir, its files no longer backed by a cgroup (ENODEV).
func removed(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// readUnified walks the v2 hierarchy reading each cgroup's cgroup.stat.
func (r *Reader) readUnified(mount string) (*Unified, error) {
	root := fsName(mount)
	u := &Unified{Mount: mount}
	type item struct{ name, rel string }
	stack := []item{{root, ""}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		b, err := fs.ReadFile(r.FS, it.name+"/cgroup.stat")
		if err != nil {
			if it.rel != "" && removed(err) {
				continue // removed while walking
			}
			return nil, fmt.Errorf("read %s/cgroup.stat: %w", it.name, err)
		}
		st, err := ParseStat(b)
		if err != nil {
			return nil, fmt.Errorf("parse %s/cgroup.stat: %w", it.name, err)
		}
		dying := st["nr_dying_descendants"]
		if it.rel == "" {
			u.Dying = dying
		} else if dying > 0 {
			u.Subtrees = append(u.Subtrees, Subtree{Path: it.rel, Dying: dying, Descendants: st["nr_descendants"]})
		}
		// A cgroup without dying descendants has none below it either,
		// and one without descendants has no subdirectories to visit.
		if dying == 0 || st["nr_descendants"]+dying == 0 {
			continue
		}
		ents, err := fs.ReadDir(r.FS, it.name)
		if err != nil {
			if it.rel != "" && removed(err) {
				continue
			}
			return nil, fmt.Errorf("list %s: %w", it.name, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				stack = append(stack, item{it.name + "/" + e.Name(), path.Join(it.rel, e.Name())})
			}
		}
	}
	slices.SortFunc(u.Subtrees, func(a, b Subtree) int {
		if a.Dying != b.Dying {
			return b.Dying - a.Dying
		}
		return strings.Compare(a.Path, b.Path)
	})
	u.Leaking = leaking(u.Dying, u.Subtrees)
	return u, nil
}

// leaking descends from the root into the child holding the most dying
// descendants while that child holds at least half of its parent's.
func leaking(rootDying int, subs []Subtree) string {
	byPath := make(map[string]Subtree, len(subs))
	for _, s := range subs {
		byPath[s.Path] = s
	}
	cur, curDying := "", rootDying
	for curDying > 0 {
		var best *Subtree
		for i := range subs {
			s := &subs[i]
			if path.Dir(s.Path) == cur || (cur == "" && !strings.Contains(s.Path, "/")) {
				if best == nil || s.Dying > best.Dying {
					best = s
				}
			}
		}
		if best == nil || best.Dying*2 < curDying {
			break
		}
		cur, curDying = best.Path, best.Dying
	}
	return cur
}

// Controller is one line of /proc/cgroups.
type Controller struct {
	Name       string
	Hierarchy  int
	NumCgroups int
	Enabled    bool
}

// ParseCgroups parses /proc/cgroups into controllers by name.
func ParseCgroups(b []byte) (map[string]Controller, error) {
	out := map[string]Controller{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if strings.HasPrefix(t, "#") || strings.TrimSpace(t) == "" {
			continue
		}
		f := strings.Fields(t)
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: %d fields, want 4: %w", line, len(f), ErrCorrupt)
		}
		var n [3]int
		for i := range n {
			v, err := strconv.Atoi(f[i+1])
			if err != nil || v < 0 {
				return nil, fmt.Errorf("line %d: field %q: %w", line, f[i+1], ErrCorrupt)
			}
			n[i] = v
		}
		out[f[0]] = Controller{Name: f[0], Hierarchy: n[0], NumCgroups: n[1], Enabled: n[2] != 0}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no controllers: %w", ErrCorrupt)
	}
	return out, nil
}

// ParseMountInfo returns the cgroup and cgroup2 mounts of a mountinfo file
// (proc(5)), in file order.
func ParseMountInfo(b []byte) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			continue
		}
		pre, post, ok := strings.Cut(t, " - ")
		if !ok {
			return nil, fmt.Errorf("line %d: no separator: %w", line, ErrCorrupt)
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 6 || len(qf) < 3 {
			return nil, fmt.Errorf("line %d: too few fields: %w", line, ErrCorrupt)
		}
		var m Mount
		switch qf[0] {
		case "cgroup":
			m.Version = 1
			for _, o := range strings.Split(qf[2], ",") {
				switch o {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children":
				default:
					if !strings.Contains(o, "=") {
						m.Controllers = append(m.Controllers, o)
					}
				}
			}
		case "cgroup2":
			m.Version = 2
		default:
			continue
		}
		m.Point = unescapeOctal(pf[4])
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	return out, nil
}

// unescapeOctal undoes mountinfo's \ooo escapes (space, tab, newline, backslash).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseStat parses a cgroup.stat file ("key value" lines).
func ParseStat(b []byte) (map[string]int, error) {
	out := map[string]int{}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		k, v, ok := strings.Cut(l, " ")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("line %d %q: %w", i+1, l, ErrCorrupt)
		}
		out[k] = n
	}
	return out, nil
}
