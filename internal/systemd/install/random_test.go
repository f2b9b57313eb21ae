package install

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// randomTreeCount is how many random trees the differential test builds;
// AMILINT_RANDOM_TREES overrides it for longer local runs.
func randomTreeCount() int {
	if n, err := strconv.Atoi(os.Getenv("AMILINT_RANDOM_TREES")); err == nil && n > 0 {
		return n
	}
	return 200
}

// treeGen builds one random unit tree from a seed.
type treeGen struct {
	r      *rand.Rand
	spec   map[string]string
	merged bool
	units  []string // names of unit files written, with their dir
}

var (
	genPrefixes = []string{"a", "b", "c", "foo-bar", "foo-bar-baz", "x", "getty", "ecs"}
	genTypes    = []string{"service", "service", "service", "socket", "target", "target", "timer", "mount", "path", "device", "slice"}
	genTargets  = []string{"multi-user.target", "default.target", "a.target", "b@.target", "b@i1.target", "sockets.target"}
	genInst     = []string{"i1", "i2", "tty1"}
)

func (g *treeGen) pick(s []string) string { return s[g.r.IntN(len(s))] }
func (g *treeGen) chance(p float64) bool  { return g.r.Float64() < p }

// name returns a random unit name: plain, template or instance.
func (g *treeGen) name() string {
	p, t := g.pick(genPrefixes), g.pick(genTypes)
	switch g.r.IntN(6) {
	case 0:
		return p + "@." + t
	case 1:
		return p + "@" + g.pick(genInst) + "." + t
	}
	return p + "." + t
}

// dir returns a random search directory (image path, no leading slash).
func (g *treeGen) dir() string {
	switch n := g.r.IntN(20); {
	case n < 8:
		return "lib/systemd/system"
	case n < 13:
		return "etc/systemd/system"
	case n < 15:
		if g.merged {
			return "lib/systemd/system"
		}
		return "usr/lib/systemd/system"
	case n < 17:
		return "run/systemd/system"
	}
	return g.pick([]string{"usr/local/lib/systemd/system", "run/systemd/transient", "run/systemd/generator",
		"run/systemd/generator.late", "etc/systemd/system.control", "etc/systemd/system.attached"})
}

// realDir maps lib to usr/lib in a merged tree, where lib is a link.
func (g *treeGen) realDir(d string) string {
	if g.merged && strings.HasPrefix(d, "lib/") {
		return "usr/" + d
	}
	return d
}

func (g *treeGen) put(p, v string) {
	if g.merged && strings.HasPrefix(p, "lib/") {
		p = "usr/" + p
	}
	if _, ok := g.spec[p]; ok {
		return
	}
	// A file and a directory of the same path cannot both exist.
	for q := range g.spec {
		if strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, strings.TrimSuffix(q, "/")+"/") {
			return
		}
	}
	g.spec[p] = v
}

// content returns a random unit file body, sometimes malformed.
func (g *treeGen) content() string {
	if g.chance(0.05) {
		return ""
	}
	var lines []string
	if g.chance(0.05) {
		lines = append(lines, "\xef\xbb\xbf[Unit]")
	} else {
		lines = append(lines, "[Unit]", "Description=random")
	}
	if g.chance(0.3) {
		lines = append(lines, "[Service]", "ExecStart=/bin/true")
	}
	if g.chance(0.8) {
		lines = append(lines, "[Install]")
	}
	for n := g.r.IntN(4); n > 0; n-- {
		switch g.r.IntN(22) {
		case 0, 1, 2, 3:
			lines = append(lines, "WantedBy="+g.pick(genTargets))
		case 4:
			lines = append(lines, "RequiredBy="+g.pick(genTargets))
		case 5, 6:
			lines = append(lines, "Alias="+g.name())
		case 7:
			lines = append(lines, "Also="+g.name())
		case 8:
			lines = append(lines, "DefaultInstance="+g.pick(append(genInst, "%i", "bad/x", "")))
		case 9:
			lines = append(lines, g.pick([]string{"WantedBy=", "Alias=", "RequiredBy="}))
		case 10:
			lines = append(lines, "# WantedBy=a.target", "; comment")
		case 11:
			lines = append(lines, g.pick([]string{"Also=%n.socket", "Also=%p.service", "Also=%i.service", "Also=%z.service", "Also=%%.service", "Also=%j@%i.service", "Also=%N.timer", "Also=x%m.service", "Also=x%o.service", "Also=%a.service", "Also=%H.service", "Also=%u%U.service", "Also=%T.service"}))
		case 12:
			lines = append(lines, g.pick([]string{"[Install", "[Ins\"tall]", "Also=nosuffix", "X=\xff", "#\xff", "Also=a\\"}))
		case 13:
			lines = append(lines, "WantedBy=\\", " "+g.pick(genTargets))
		case 14:
			lines = append(lines, "WantedBy=\""+g.pick(genTargets)+" "+g.pick(genTargets)+"\"")
		case 15:
			lines = append(lines, "WantedBy=\"unbalanced")
		case 16:
			lines = append(lines, "[Service]", "Restart=always", "[Install]")
		case 17:
			lines = append(lines, "UpheldBy="+g.pick(genTargets))
		case 18:
			lines = append(lines, "wantedby=a.target", "WantedBy")
		case 19:
			lines = append(lines, "[X-Ext]", "WantedBy=a.target", "[Install]")
		case 20:
			lines = append(lines, "Also="+g.name()+" "+g.name())
		default:
			lines = append(lines, "  WantedBy = "+g.pick(genTargets)+"  ")
		}
	}
	sep := "\n"
	if g.chance(0.05) {
		sep = g.pick([]string{"\r\n", "\r", "\x00"})
	}
	return strings.Join(lines, sep) + sep
}

// linkTarget returns a random symlink target for a unit link placed in dir.
func (g *treeGen) linkTarget(dir, name string) string {
	switch g.r.IntN(12) {
	case 0:
		return "/dev/null"
	case 1:
		if g.chance(0.7) {
			g.put("opt/"+name, g.content())
		}
		return "/opt/" + name
	case 2:
		return "/opt/" + g.name()
	case 3:
		return "/nonexistent/" + name
	case 4:
		return "../" + g.name()
	case 5:
		if len(g.units) > 0 {
			u := g.pick(g.units)
			return "/" + u
		}
	case 6:
		if len(g.units) > 0 {
			u := g.pick(g.units)
			rel := strings.Repeat("../", strings.Count(dir, "/")+1) + u
			return rel
		}
	case 7:
		return "/lib/systemd/system/" + g.name()
	case 8:
		return "/usr/lib/systemd/system/" + name
	case 9:
		return "/etc/systemd/system/" + g.name()
	}
	return g.name()
}

func (g *treeGen) build() {
	g.merged = g.chance(0.3)
	if g.merged {
		g.spec["lib"] = "-> usr/lib"
	}
	for n := 5 + g.r.IntN(15); n > 0; n-- {
		d, name := g.dir(), g.name()
		g.put(d+"/"+name, g.content())
		g.units = append(g.units, g.realDir(d)+"/"+name)
	}
	for n := g.r.IntN(3); n > 0; n-- {
		name := g.name()
		g.put("opt/"+name, g.content())
	}
	// Top-level links: aliases, masks, linked units, dangling links.
	for n := g.r.IntN(10); n > 0; n-- {
		d := g.dir()
		name := g.name()
		g.put(d+"/"+name, "-> "+g.linkTarget(d, name))
	}
	// .wants/.requires/.upholds directories.
	for n := g.r.IntN(8); n > 0; n-- {
		d := g.pick([]string{"etc/systemd/system", "etc/systemd/system", "lib/systemd/system", "run/systemd/system", "usr/lib/systemd/system"})
		kind := g.pick([]string{".wants", ".wants", ".wants", ".requires", ".upholds"})
		sub := g.pick(genTargets) + kind
		var name, target string
		if len(g.units) > 0 && g.chance(0.7) {
			u := g.pick(g.units)
			name = u[strings.LastIndexByte(u, '/')+1:]
			target = "/" + u
			if t, err := nameTemplateOf(name); err == nil && nameIsValid(name, nameTemplate) && g.chance(0.6) {
				name = strings.TrimSuffix(t, "."+nameType(t))
				name = name + g.pick(genInst) + "." + nameType(t)
			}
			if g.chance(0.3) {
				target = "../" + u[strings.LastIndexByte(u, '/')+1:]
			}
		} else {
			name = g.name()
			target = g.linkTarget(d+"/"+sub, name)
		}
		if g.chance(0.05) {
			name = "." + name
		}
		g.put(d+"/"+sub+"/"+name, "-> "+target)
	}
	// Drop-ins.
	for n := g.r.IntN(5); n > 0; n-- {
		d := g.dir()
		var dd string
		switch g.r.IntN(6) {
		case 0:
			dd = g.pick(genTypes)
		case 1:
			dd = "foo-." + g.pick(genTypes)
		default:
			if len(g.units) > 0 {
				u := g.pick(g.units)
				dd = u[strings.LastIndexByte(u, '/')+1:]
			} else {
				dd = g.name()
			}
		}
		file := d + "/" + dd + ".d/" + g.pick([]string{"10-a.conf", "20-b.conf", "a.conf", ".hidden.conf", "x.conf.bak", "noconf"})
		switch g.r.IntN(8) {
		case 0:
			g.put(file, "-> "+g.pick([]string{"/nowhere.conf", "/dev/null", "../../../../../dev/null"}))
		case 1:
			g.put(file, "")
		case 2:
			g.put(file, "-> /opt/dropin.conf")
			g.put("opt/dropin.conf", "[Install]\nWantedBy=a.target\n")
		default:
			g.put(file, g.content())
		}
	}
	// Linked directories: a drop-in directory and a whole search directory
	// that are relative links (absolute ones would send systemctl to the
	// host, which opendir()s them outside --root).
	if g.chance(0.1) && len(g.units) > 0 {
		u, d := g.pick(g.units), g.dir()
		up := strings.Repeat("../", strings.Count(g.realDir(d), "/")+1)
		g.put(d+"/"+u[strings.LastIndexByte(u, '/')+1:]+".d", "-> "+up+"opt/dropins")
		g.put("opt/dropins/50-x.conf", g.content())
	}
	if g.chance(0.05) {
		g.put("usr/local/lib/systemd/system", "-> ../../../../opt/local")
		g.put("opt/local/"+g.name(), g.content())
		g.put("etc/systemd/system/"+g.name(), "-> /usr/local/lib/systemd/system/"+g.name())
	}
	// Odd entries: directories named like units, hidden and backup files.
	if g.chance(0.1) {
		g.put(g.dir()+"/"+g.name()+"/", "")
	}
	if g.chance(0.1) {
		g.put(g.dir()+"/."+g.name(), g.content())
	}
	if g.chance(0.1) {
		g.put(g.dir()+"/"+g.name()+".dpkg-old", g.content())
	}
	// Presets.
	for n := g.r.IntN(3); n > 0; n-- {
		d := g.pick([]string{"etc", "usr/lib", "lib", "run", "usr/local/lib"}) + "/systemd/system-preset/"
		var lines []string
		for k := g.r.IntN(5); k > 0; k-- {
			act := g.pick([]string{"enable", "disable", "enable", "bogus", "ignore"})
			pat := g.pick([]string{"*", "a.*", "*.socket", "foo-*", "[ab].service", "x@.service i1 i2", g.name(), "?.target", "[!a]*"})
			lines = append(lines, act+" "+pat)
		}
		g.put(d+g.pick([]string{"10-a.preset", "90-b.preset", "99-default.preset"}), strings.Join(lines, "\n")+"\n")
	}
	if g.chance(0.2) {
		// An image's /dev/null as a plain empty file (debootstrap makes the
		// device node; a tarball may hold a file).
		g.put("dev/null", "")
	}
	if g.chance(0.2) {
		g.put(g.pick([]string{"etc/os-release", "usr/lib/os-release"}), g.pick([]string{"ID=debian\nVERSION_ID=\"12\"\n", "NAME=x\n"}))
	}
	if g.chance(0.3) {
		g.put("etc/machine-id", g.pick([]string{"0123456789abcdef0123456789abcdef\n", "uninitialized\n", ""}))
	}
}

// genTree returns the random tree of seed.
func genTree(seed uint64) map[string]string {
	g := &treeGen{r: rand.New(rand.NewPCG(seed, 0x616d696c696e74)), spec: map[string]string{}}
	g.build()
	return g.spec
}

// TestRandomTreesMatchSystemctl is the differential test: hundreds of
// seeded random trees, each compared unit by unit (state and preset) with
// the real systemctl --root list-unit-files.
func TestRandomTreesMatchSystemctl(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			n := randomTreeCount()
			failed := 0
			seen := map[string]int{}
			for seed := uint64(1); seed <= uint64(n); seed++ {
				ok := t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					dir := t.TempDir()
					writeTree(t, dir, genTree(seed))
					for _, e := range compareTree(t, sd, dir, true) {
						seen[e.state]++
					}
				})
				if !ok {
					failed++
					if failed >= 10 {
						t.Fatalf("stopping after %d differing trees", failed)
					}
				}
			}
			// The generator must reach every state systemctl can print.
			for _, st := range []State{Enabled, EnabledRuntime, Linked, LinkedRuntime, Alias, Masked, MaskedRuntime,
				Static, Disabled, Indirect, Generated, Transient, Bad} {
				assert.Positive(t, seen[string(st)], "no random tree produced state %s (seen %v)", st, seen)
			}
		})
	}
}
