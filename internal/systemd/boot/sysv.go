package boot

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// generatorDirs are the system generator directories in precedence order
// (systemd 252 on Debian); a same-named entry linked to /dev/null in an
// earlier one masks a generator.
var generatorDirs = []string{
	"run/systemd/system-generators",
	"etc/systemd/system-generators",
	"usr/local/lib/systemd/system-generators",
	"lib/systemd/system-generators",
	"usr/lib/systemd/system-generators",
}

// sysvGenerator is the generator that turns init scripts into units.
const sysvGenerator = "systemd-sysv-generator"

// sysvDir is where systemd-sysv-generator writes (the "late" directory:
// every native unit wins over it).
const sysvDir = "run/systemd/generator.late"

// sysvRunlevels are the rcN.d directories systemd-sysv-generator reads and
// the targets their S links make want a script's service.
var sysvRunlevels = []struct{ dir, target string }{
	{"etc/rc1.d", "rescue.target"},
	{"etc/rc2.d", "multi-user.target"},
	{"etc/rc3.d", "multi-user.target"},
	{"etc/rc4.d", "multi-user.target"},
	{"etc/rc5.d", "graphical.target"},
}

// genFile is a unit file a generator would write.
type genFile struct {
	data   []byte
	source string // the image file it is generated from
}

// hasGenerator reports whether the image ships the generator name and does
// not mask it (see generatorPath).
func (g *Graph) hasGenerator(name string) bool { return generatorPath(g.fsys, name) != "" }

// sysv models systemd-sysv-generator: every executable init script in
// /etc/init.d without a native unit of the same name becomes NAME.service
// (Type=forking, RemainAfterExit=yes), aliased by its LSB Provides: names,
// wanting network-online.target when it requires $network, and wanted by
// the target of every rcN.d directory holding an S link for it. The
// generated units and links are added at the lowest precedence, as the
// generator writes them to /run/systemd/generator.late.
func (g *Graph) sysv() {
	if !g.hasGenerator(sysvGenerator) {
		return
	}
	ents, err := g.fsys.ReadDir("etc/init.d")
	if err != nil {
		return
	}
	type script struct {
		name, path string
		lsb        lsbHeader
	}
	scripts := map[string]*script{}
	for _, e := range ents {
		if unit.HiddenOrBackup(e.Name()) {
			continue
		}
		p := "etc/init.d/" + e.Name()
		fi, err := g.fsys.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o100 == 0 {
			continue
		}
		name := sysvName(e.Name())
		if name == "" || scripts[name] != nil {
			continue
		}
		if _, native := g.ids[name]; native {
			continue // a native unit, an alias or a mask of that name exists
		}
		data, err := g.fsys.ReadFile(p)
		if err != nil {
			continue
		}
		scripts[name] = &script{name: name, path: "/" + p, lsb: parseLSB(data, e.Name())}
	}
	if len(scripts) == 0 {
		return
	}
	if g.generated == nil {
		g.generated = map[string]genFile{}
		g.genDeps = map[string][]Dep{}
	}
	// The S links of the rcN.d directories: the targets that want each
	// script's service, and its start priority (the highest of its
	// links' two digits).
	type want struct{ target, src string }
	wanted := map[string][]want{}
	prio := map[string]int{}
	for _, rl := range sysvRunlevels {
		ents, err := g.fsys.ReadDir(rl.dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			l := e.Name()
			if unit.HiddenOrBackup(l) || len(l) < 4 || l[0] != 'S' || !isDigit(l[1]) || !isDigit(l[2]) {
				continue
			}
			n := sysvName(l[3:])
			if scripts[n] == nil {
				continue
			}
			prio[n] = max(prio[n], int(l[1]-'0')*10+int(l[2]-'0')+1)
			dup := false
			for _, d := range g.genDeps[rl.target] {
				dup = dup || d.Name == n
			}
			if !dup {
				g.genDeps[rl.target] = append(g.genDeps[rl.target], Dep{Kind: "sysv", Name: n, Source: "/" + rl.dir + "/" + l})
			}
			if !slices.ContainsFunc(wanted[n], func(w want) bool { return w.target == rl.target }) {
				wanted[n] = append(wanted[n], want{rl.target, l})
			}
		}
	}
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := scripts[n]
		file := "/" + sysvDir + "/" + n
		var b strings.Builder
		fmt.Fprintf(&b, "[Unit]\nDocumentation=man:systemd-sysv-generator(8)\nSourcePath=%s\n", s.path)
		for _, w := range s.lsb.wants {
			fmt.Fprintf(&b, "Wants=%s\n", w)
		}
		// The ordering the generator writes: the header's, the
		// runlevel targets', and, against the other scripts with S
		// links unless both have a header, the start priorities'
		// (fix_order).
		before, after := s.lsb.before, s.lsb.after
		for _, w := range wanted[n] {
			before = append(before, w.target)
		}
		if p := prio[n]; p > 0 {
			for _, m := range names {
				q := prio[m]
				if m == n || q == 0 || s.lsb.has && scripts[m].lsb.has {
					continue
				}
				switch {
				case q < p:
					after = append(after, m)
				case q > p:
					before = append(before, m)
				}
			}
		}
		for _, m := range before {
			fmt.Fprintf(&b, "Before=%s\n", m)
		}
		for _, m := range after {
			fmt.Fprintf(&b, "After=%s\n", m)
		}
		fmt.Fprintf(&b, "[Service]\nType=forking\nRestart=no\nTimeoutSec=5min\nIgnoreSIGPIPE=no\nKillMode=process\n"+
			"GuessMainPID=no\nRemainAfterExit=yes\nSuccessExitStatus=5 6\nExecStart=%s start\nExecStop=%s stop\n", s.path, s.path)
		g.generated[file] = genFile{data: []byte(b.String()), source: s.path}
		g.ids[n] = idEntry{path: file}
		for _, a := range s.lsb.aliases {
			if _, taken := g.ids[a]; !taken && a != n {
				g.ids[a] = idEntry{alias: n, link: "/" + sysvDir + "/" + a}
			}
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// sysvName is sysv_translate_name: "foo.sh" and "foo" give "foo.service";
// names systemd would have to escape are skipped.
func sysvName(file string) string {
	n := strings.TrimSuffix(file, ".sh") + ".service"
	if !unit.Valid(n) || strings.Contains(n, "@") {
		return ""
	}
	return n
}

// lsbHeader is what systemd-sysv-generator takes from an LSB header.
type lsbHeader struct {
	has     bool     // the script has a header
	aliases []string // Provides: service names
	wants   []string // network-online.target for $network, Provides: targets
	// before and after are the ordering of Provides: targets (before
	// them; network-online.target also before network.target), of
	// X-Start-Before: (before) and of Required-Start:, Should-Start: and
	// X-Start-After: (after).
	before, after []string
}

// parseLSB reads the "### BEGIN INIT INFO" block of an init script as
// load_sysv does, keeping what changes the boot transaction.
func parseLSB(data []byte, file string) lsbHeader {
	var h lsbHeader
	in := false
	self := strings.TrimSuffix(file, ".sh")
	for _, raw := range unit.SplitLines(data) {
		t := strings.Trim(string(raw), " \t\n\r")
		if !strings.HasPrefix(t, "#") {
			continue
		}
		if !in {
			in = t == "### BEGIN INIT INFO"
			h.has = h.has || in
			continue
		}
		if t == "### END INIT INFO" {
			break
		}
		t = strings.TrimLeft(t[1:], " \t\n\r")
		key, rest, ok := strings.Cut(t, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(key) {
		case "provides":
			for _, w := range strings.Fields(rest) {
				m := sysvFacility(w, self)
				switch unit.Type(m) {
				case "service":
					h.aliases = append(h.aliases, m)
				case "target":
					h.wants = append(h.wants, m)
					h.before = append(h.before, m)
					if m == "network-online.target" {
						h.before = append(h.before, "network.target")
						h.wants = append(h.wants, "network.target")
					}
				}
			}
		case "required-start", "should-start", "x-start-after", "x-start-before":
			// handle_dependencies
			for _, w := range strings.Fields(rest) {
				m := sysvFacility(w, self)
				switch {
				case m == "":
				case strings.EqualFold(key, "x-start-before"):
					h.before = append(h.before, m)
				default:
					h.after = append(h.after, m)
					if m == "network-online.target" {
						h.wants = append(h.wants, m)
					}
				}
			}
		}
	}
	return h
}

// sysvFacility is sysv_translate_facility: LSB facilities become targets,
// other "$x" become "x.target", the script's own name nothing, and any
// other name a service.
func sysvFacility(w, self string) string {
	n := strings.TrimPrefix(w, "$")
	switch n {
	case "local_fs", "syslog":
		return ""
	case "network":
		return "network-online.target"
	case "named":
		return "nss-lookup.target"
	case "portmap":
		return "rpcbind.target"
	case "remote_fs":
		return "remote-fs.target"
	case "time":
		return "time-sync.target"
	}
	if strings.HasPrefix(w, "$") {
		if t := n + ".target"; unit.Valid(t) {
			return t
		}
		return ""
	}
	if n == self {
		return ""
	}
	return sysvName(n)
}

// readFragment reads a unit file, generated or in the image.
func (g *Graph) readFragment(p string) ([]byte, error) {
	if f, ok := g.generated[p]; ok {
		return f.data, nil
	}
	data, err := g.fsys.ReadFile(rootfs.Clean(p))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// GeneratedBy returns the image path of the generator that writes the
// file p at boot (a unit, drop-in or .wants link under
// /run/systemd/generator*, as a Fragment, DropIns entry or Dep.Source
// names it), "" for the image's own files.
func (g *Graph) GeneratedBy(p string) string {
	if _, ok := g.generated[p]; ok {
		return generatorPath(g.fsys, sysvGenerator)
	}
	return g.gen.source(p)
}

// sourcePath is the file a generated unit comes from, or "".
func (g *Graph) sourcePath(fragment string) string {
	if f, ok := g.generated[fragment]; ok {
		return f.source
	}
	return ""
}
