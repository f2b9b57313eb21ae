package boot

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The random oracle: seeded random trees stacked over each Debian root,
// each compared with systemd --test of that root's systemd.
//
//	AMILINT_ORACLE_SEEDS=N   compare seeds 1..N (default defaultOracleSeeds)
//	AMILINT_ORACLE_SEED=S    compare seed S alone, printing its tree
//	AMILINT_ORACLE_REPEAT=K  run systemd up to K times on a tree whose first
//	                         answer differs from the model's (default 10)

// defaultOracleSeeds is how many random trees CI compares per systemd
// version: each costs one systemd --test run (about 0.3 s on two cores).
const defaultOracleSeeds = 500

// feature names what a random tree exercises, for the coverage check.
type feature string

const (
	featRun             feature = "/run content"
	featVarRun          feature = "a unit linked through /var/run"
	featRequiresMasked  feature = "a masked unit required via .requires/"
	featRequiresMissing feature = "a missing unit required via .requires/"
	featRequiresSetting feature = "Requires= on a masked or missing unit"
	featDefaultMasked   feature = "default.target masked"
	featDefaultMissing  feature = "default.target missing"
	featDefaultAlias    feature = "default.target aliased to another target"
	featRescueMasked    feature = "rescue.target masked"
	featTemplate        feature = "template instances"
	featAlias           feature = "aliases"
	featUpholds         feature = ".upholds/ links"
	featSetting         feature = "a unit file with a setting systemd may refuse"
	featBadExec         feature = "a command line that fails a unit file"
	featInstanceExec    feature = "a template whose %i may make a command path invalid"
	featDropinCut       feature = "a drop-in cut short by a bad setting"
	featUnclean         feature = "a line that is not UTF-8 clean"
	featMount           feature = "a mount unit nothing enables"
	featMountMasked     feature = "a masked mount unit"
	featMountBad        feature = "a mount unit refused for its settings"
	featMountNeed       feature = "a setting that needs a mount"
	featSocketPath      feature = "a socket listening under a mount"
	featSocketExec      feature = "a socket running commands"
	featListReset       feature = "an emptied Listen*= or On*= list"
	featLogNamespace    feature = "LogNamespace="
	featVerify          feature = "a setting a type's verify step refuses"
	featTimerValue      feature = "a timer value its parser may ignore"
	featListenAddr      feature = "a listen address its parser may ignore"
	featImageModules    feature = "a disk image under a device policy"
	featAPIVFSWorkDir   feature = "a WorkingDirectory= below /proc, /sys or /dev, maybe in a mount namespace"
	featOrder           feature = "After= or Before= among the tree's units and the boot targets"
	featSocketsWants    feature = "a unit of any type in sockets.target.wants"
)

// randomFeatures are the features the coverage check expects in CI's
// default run.
var randomFeatures = []feature{featRun, featVarRun, featRequiresMasked, featRequiresMissing, featRequiresSetting,
	featDefaultMasked, featDefaultMissing, featDefaultAlias, featRescueMasked, featTemplate, featAlias, featUpholds,
	featSetting, featBadExec, featInstanceExec, featDropinCut, featUnclean, featMount, featMountMasked, featMountBad,
	featMountNeed, featSocketPath, featSocketExec, featListReset, featLogNamespace, featVerify, featTimerValue,
	featListenAddr, featImageModules, featAPIVFSWorkDir, featOrder, featSocketsWants}

// treeGen builds one random tree.
type treeGen struct {
	r *rand.Rand
	// image draws the settings of featImageModules, apart from r for the
	// same reason.
	image *rand.Rand
	// workDir draws the settings of featAPIVFSWorkDir, apart from r for
	// the same reason.
	workDir *rand.Rand
	// listen draws the listen addresses of featListenAddr, apart from r
	// so that the rest of each seed's tree is as before they were added.
	listen *rand.Rand
	// order draws the orderings of featOrder and featSocketsWants, apart
	// from r for the same reason.
	order *rand.Rand
	ops   []op
	feats map[feature]bool
	// required counts what the tree adds to multi-user.target's own
	// requirements (Requires=basic.target aside): one at most, for the
	// reason in unitFile.
	required int
	// needsMount are the units given a setting that needs a mount.
	needsMount map[string]bool
}

func (g *treeGen) chance(p float64) bool  { return g.r.Float64() < p }
func (g *treeGen) pick(s []string) string { return pickFrom(g.r, s) }
func (g *treeGen) add(o ...op)            { g.ops = append(g.ops, o...) }
func (g *treeGen) has(f feature)          { g.feats[f] = true }
func (g *treeGen) dir() string {
	return g.pick([]string{etcDir, etcDir, libDir, "/lib/systemd/system/"})
}

// pickFrom is one of s, drawn from r.
func pickFrom(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }

func (g *treeGen) link(from, to string) op { return link(from, to) }
func (g *treeGen) file(p, text string) op  { return file(p, text) }

const (
	etcDir = "/etc/systemd/system/"
	libDir = "/usr/lib/systemd/system/"
)

// randomNames are the units a random tree defines (and some it only
// names): services, a template, a socket, a timer, targets.
var randomNames = []string{"r-a.service", "r-b.service", "r-c.service", "r-d-e.service", "r-f.service",
	"r-g@.service", "r-h.socket", "r-i.timer", "r-j.service", "r-k.service", "r-t.target", "r-u.target"}

// dep returns a random dependency name: one of the tree's units (an
// instance for the template), one it masks, or one that does not exist.
func (g *treeGen) dep() string {
	switch g.r.IntN(14) {
	case 0:
		return "r-missing.service"
	case 1:
		return "r-masked.service"
	}
	n := g.pick(randomNames)
	if unit.IsTemplate(n) {
		g.has(featTemplate)
		return unit.WithInstance(n, g.instance())
	}
	return n
}

// instance returns an instance name for the template: mostly a plain
// word, sometimes "." or "..", which turn a path such as /bin/%i into one
// systemd refuses.
func (g *treeGen) instance() string {
	if g.chance(0.08) {
		return g.pick([]string{".", ".."})
	}
	return g.pick([]string{"one", "two"})
}

// randomMounts are the mount units a tree may define without enabling
// them, for the paths the settings of mountPath need.
var randomMounts = []struct{ name, where string }{
	{"srv-rm.mount", "/srv/rm"}, {"srv-rm-sub.mount", "/srv/rm/sub"}, {"var-lib-rst.mount", "/var/lib/rst"},
}

// mountUnits adds some of randomMounts: plain, masked, refused for their
// settings, or wanting or conflicting with one of the tree's units.
func (g *treeGen) mountUnits() {
	for _, m := range randomMounts {
		if !g.chance(0.5) {
			continue
		}
		g.has(featMount)
		body := "[Mount]\nWhat=tmpfs\nWhere=" + m.where + "\nType=tmpfs\n"
		switch g.r.IntN(9) {
		case 0:
			g.has(featMountMasked)
			g.add(g.link(g.dir()+m.name, "/dev/null"))
			continue
		case 1:
			g.has(featMountBad)
			body = "[Mount]\nWhere=" + m.where + "\nType=tmpfs\n" // no What=
		case 2:
			g.has(featMountBad)
			body = "[Mount]\nWhat=tmpfs\nWhere=/srv/elsewhere\nType=tmpfs\n"
		case 3:
			g.has(featMountBad)
			body += g.pick([]string{"User=in valid\n", "WorkingDirectory=rel\n", "ExecMount=x\n"})
		case 4:
			body = "[Unit]\nWants=" + g.dep() + "\n" + body
		case 5:
			// Not with a unit that needs the mount: when both are
			// required, which of the two systemd's message names
			// depends on hash-table order.
			if c := g.pick(randomNames[:5]); !g.needsMount[c] {
				body = "[Unit]\nConflicts=" + c + "\n" + body
			}
		}
		g.add(g.file(g.dir()+m.name, body))
	}
}

// mountPath returns a setting that needs the mounts of one of
// randomMounts' paths: strongly (a Requires= on each mount unit), or, when
// strong is false, weakly or not at all.
func (g *treeGen) mountPath(name string, strong bool) string {
	g.has(featMountNeed)
	g.needsMount[name] = true
	template := unit.IsTemplate(name)
	weak := []string{"WorkingDirectory=-/srv/rm/x\n", "RootDirectory=/srv/rm/sub\n", "PIDFile=/srv/rm/p.pid\n", "RuntimeDirectory=rt\n"}
	if !strong {
		return g.pick(weak)
	}
	all := append(weak, "WorkingDirectory=/srv/rm/x\n", "WorkingDirectory=/srv/rm/sub/x\n", "StateDirectory=rst\n",
		"StateDirectory=rst/a private/b\n", "[Unit]\nRequiresMountsFor=/srv/rm/sub/x\n[Service]\n")
	if template {
		all = append(all, "WorkingDirectory=/srv/rm/%i\n", "[Unit]\nRequiresMountsFor=/srv/rm/%i\n[Service]\n")
	}
	return g.pick(all)
}

// command returns a random command line, valid or not, with or without a
// "-" prefix that ignores its failure.
func (g *treeGen) command(template bool) string {
	good := []string{"/bin/true", "-/bin/false", "/bin/echo %n %i", "/bin/true ; /bin/false", "@/bin/true true", "-bin/x", "-/bin/%X"}
	bad := []string{"bin/x", "/bin/%X", "/usr/bin/../bin/true", "\"/bin/true", "/bin/.", "/bin/true ; bin/x", "@/bin/true"}
	if template && g.chance(0.5) {
		g.has(featInstanceExec)
		return g.pick([]string{"/bin/%i", "-/bin/%i", "/bin/%I", "/bin/true %i"})
	}
	if g.chance(0.5) {
		g.has(featBadExec)
		return g.pick(bad)
	}
	return g.pick(good)
}

// serviceSettings returns settings for a service's [Service] section that
// systemd may refuse, that need mounts, or that add dependencies (any
// "[Unit]" section they open is closed again). strong is whether a
// setting may require mounts (see unitFile).
func (g *treeGen) serviceSettings(name string, strong bool) string {
	g.has(featSetting)
	tmpl := unit.IsTemplate(name)
	switch g.r.IntN(9) {
	case 0, 1:
		key := g.pick([]string{"ExecStartPre", "ExecStartPost", "ExecStop", "ExecReload", "ExecCondition", "ExecStopPost"})
		return key + "=" + g.command(tmpl) + "\n"
	case 2:
		return g.mountPath(name, strong)
	case 3:
		return "WorkingDirectory=" + g.pick([]string{"rel", "-rel", "~", "/a/../b", "/%X", "-/%X", "/srv/%i"}) + "\n"
	case 4:
		return "PIDFile=" + g.pick([]string{"/run/r.pid", "/a/../b", "rel/x.pid", "/run/%X.pid", "/dev/x.pid", "/run/%i.pid", ""}) + "\n"
	case 5:
		s := "DynamicUser=" + g.pick([]string{"yes", "maybe", "", "no"}) + "\n"
		if g.chance(0.3) {
			s += "WorkingDirectory=~\n"
		}
		return s
	case 6:
		g.has(featLogNamespace)
		return "LogNamespace=" + g.pick([]string{"rns", "rns", "bad/x", "%i", "rns\nLogNamespace=", "%X"}) + "\n"
	case 7:
		g.has(featVerify)
		return g.pick([]string{"Type=bogus\n", "Type=oneshot\nRestart=always\n", "Type=oneshot\nExitType=cgroup\n",
			"PAMName=login\nKillMode=process\n", "Type=oneshot\nRestartForceExitStatus=1\n", "Restart=sometimes\n",
			"Type=forking\nPrivatePIDs=yes\n", "User=" + g.pick([]string{"in valid", "root", "%i", "0123"}) + "\n"})
	default:
		g.has(featUnclean)
		return g.pick([]string{"Description=\xff\n", "Environment=A=\xef\xbf\xbe\n", "Description=ok\n"})
	}
}

// socketSettings returns the [Socket] section of r-h.socket: a path under
// a mount, commands, an emptied list of listen addresses, settings its
// verify step refuses.
func (g *treeGen) socketSettings(name string, strong bool) string {
	var b strings.Builder
	b.WriteString("[Socket]\n")
	switch {
	case strong && g.chance(0.2):
		g.has(featSocketPath)
		g.has(featMountNeed)
		g.needsMount[name] = true
		fmt.Fprintf(&b, "ListenStream=/srv/rm/%s\n", name)
	case g.listen.Float64() < 0.15:
		// Only addresses the parser may ignore: a socket left with
		// none is refused.
		g.has(featListenAddr)
		for range 1 + g.listen.IntN(2) {
			b.WriteString(g.listenAddr())
		}
	default:
		fmt.Fprintf(&b, "ListenStream=/run/%s\n", name)
	}
	if g.chance(0.5) {
		b.WriteString("Service=r-j.service\n")
	}
	if g.chance(0.15) {
		g.has(featSocketExec)
		fmt.Fprintf(&b, "ExecStartPre=%s\n", g.pick([]string{"/bin/true", "-rel/x", "rel/x"}))
		if strong && g.chance(0.5) {
			b.WriteString(g.mountPath(name, true))
		}
	}
	if g.chance(0.1) {
		g.has(featListReset)
		b.WriteString(g.pick([]string{"ListenDatagram=\n", "ListenFIFO=\nListenStream=/run/r-h2.sock\n"}))
	}
	if g.listen.Float64() < 0.1 {
		// One next to the others: an ignored one counts neither for
		// Accept= nor for Symlinks=.
		g.has(featListenAddr)
		b.WriteString(g.listenAddr())
	}
	if g.chance(0.1) {
		g.has(featVerify)
		b.WriteString(g.pick([]string{"Accept=yes\n", "MaxConnections=0\n", "Accept=yes\nMaxConnections=0\n", "Symlinks=/run/r-h.link\n"}))
	}
	return b.String()
}

// randomTimerValues are timer settings the parsers keep or ignore.
var randomTimerValues = []string{
	"OnCalendar=bogus\n", "OnCalendar=*-*~9,27\n", "OnCalendar=*-*~27\n", "OnCalendar=daily Nowhere/Zone\n",
	"OnCalendar=daily Europe/Berlin\n", "OnCalendar=daily CET\n", "OnCalendar=%X\n", "OnCalendar=Mon..Fri 09:00\n",
	"OnCalendar=2024-13-01\n", "OnCalendar=@0\n", "OnBootSec=1.2.3\n", "OnBootSec=%X\n", "OnActiveSec=+.5\n",
	"OnActiveSec=5min\n", "OnUnitInactiveSec=5.\n", "OnStartupSec=infinity\n", "OnClockChange=maybe\n",
	"OnClockChange=yes\n", "OnTimezoneChange=no\n", "OnBootSec=\n", "OnCalendar=\n",
}

// listenAddr returns a listen setting whose value socket_address_parse or
// socket_address_parse_netlink may refuse, or systemd 252 and 257 read
// differently. Scopes name only the loopback or links no host has.
func (g *treeGen) listenAddr() string {
	if g.listen.Float64() < 0.25 {
		return "ListenNetlink=" + pickFrom(g.listen, []string{"kobject-uevent 1", "audit", "nosuchfamily", "route x", "99",
			"2147483648", "route 0x10", "%X", "Route"}) + "\n"
	}
	return pickFrom(g.listen, []string{"ListenStream", "ListenStream", "ListenDatagram", "ListenSequentialPacket"}) + "=" +
		pickFrom(g.listen, []string{"127.0.0.1:8080", "1.2.3.4.5:80", "1.2.3.4:0", "1.2.3.4:65536", "01.2.3.4:80", "0", "65536",
			"8081", "0x1f92", "+0b1010000", "0b0b1", "-1", "[::1]:8082", "[::1]", "::1", "[1::2::3]:80",
			"[::1]:8083%%lo", "[::1]:8084%%1", "[::1]:8085%%99999", "[::1]:8086%%nosuchif0", "[::1]:80#x",
			"vsock::9000", "vsock:x:1", "vsock-stream::9001", "vsock:host:9002", "vsock:2:4294967295", "@", "@r-abs",
			"/", "/run/" + strings.Repeat("l", 103), "/run/" + strings.Repeat("m", 102), "run/rel", "/run/%X"}) + "\n"
}

// unitFile returns a random unit file for name.
func (g *treeGen) unitFile(name string) string {
	var b strings.Builder
	b.WriteString("[Unit]\n")
	// At most one Requires= or BindsTo=: when one of several fails,
	// which of the others systemd added first depends on the order it
	// walks a hash table, so the outcome changes from run to run.
	pulls := 0
	switch {
	case name == "r-t.target":
		pulls = 1 // it gets .requires links (see randomTree)
	case unit.IsTemplate(name):
		pulls = 1 // its instances require their new slice already
	}
	for range g.r.IntN(4) {
		key := g.pick([]string{"Wants", "Wants", "Wants", "Requires", "Requires", "Requisite", "BindsTo", "Upholds", "PartOf"})
		if key == "Requires" || key == "BindsTo" {
			if pulls++; pulls > 1 {
				key = "Wants"
			}
		}
		d := g.dep()
		if key != "Wants" && key != "Upholds" && key != "PartOf" && (d == "r-missing.service" || d == "r-masked.service") {
			g.has(featRequiresSetting)
		}
		fmt.Fprintf(&b, "%s=%s\n", key, d)
	}
	b.WriteString(g.orderings())
	if g.chance(0.15) {
		b.WriteString("DefaultDependencies=no\n")
	}
	// A setting that needs a mount requires it like a Requires= does.
	strong := pulls == 0
	switch unit.Type(name) {
	case "socket":
		b.WriteString(g.socketSettings(name, strong))
	case "timer":
		b.WriteString("[Timer]\n")
		if g.chance(0.3) {
			// Values config_parse_timer may ignore, leaving none.
			g.has(featTimerValue)
			for range 1 + g.r.IntN(2) {
				b.WriteString(g.pick(randomTimerValues))
			}
		} else {
			b.WriteString("OnBootSec=5\n")
		}
		if g.chance(0.5) {
			b.WriteString("Unit=r-k.service\n")
		}
		if g.chance(0.1) {
			g.has(featListReset)
			b.WriteString(g.pick([]string{"OnCalendar=\n", "OnUnitActiveSec=\nOnActiveSec=1h\n"}))
		}
	case "target":
	default:
		switch g.r.IntN(10) {
		case 0:
			b.WriteString("[Service]\nType=simple\n") // refused: no ExecStart=
		case 1:
			b.WriteString("[Service]\nType=oneshot\nExecStart=/bin/true\nExecStart=/bin/true\n")
		case 2:
			if unit.IsTemplate(name) {
				g.has(featInstanceExec)
				fmt.Fprintf(&b, "[Service]\nExecStart=%s\n", g.pick([]string{"/bin/%i", "/usr/bin/%i/../true", "-/bin/%i"}))
				break
			}
			fallthrough
		default:
			b.WriteString("[Service]\nExecStart=/bin/true\n")
		}
		for range 2 {
			if g.chance(0.2) {
				b.WriteString(g.serviceSettings(name, strong))
			}
		}
		if g.image.Float64() < 0.1 {
			g.has(featImageModules)
			b.WriteString("[Service]\n")
			for range 1 + g.image.IntN(3) {
				b.WriteString(randomImageSettings[g.image.IntN(len(randomImageSettings))])
			}
		}
		if g.workDir.Float64() < 0.1 {
			g.has(featAPIVFSWorkDir)
			b.WriteString("[Service]\nWorkingDirectory=" + randomWorkDirs[g.workDir.IntN(len(randomWorkDirs))] + "\n")
			for range g.workDir.IntN(3) {
				s := mountNSSettings[g.workDir.IntN(len(mountNSSettings))]
				if g.workDir.IntN(2) == 0 {
					b.WriteString(s.kept + "\n")
				} else {
					b.WriteString(s.ignore + "\n")
				}
			}
		}
	}
	return b.String()
}

// orderTargets are the boot targets a tree's unit may order itself
// against; with a unit's default dependencies some of these orderings make
// cycles (a service with default dependencies Before=sysinit.target,
// which basic.target, after which the service starts, starts after).
var orderTargets = []string{"sysinit.target", "basic.target", "sockets.target", "multi-user.target", "local-fs.target"}

// orderings returns, for some units, After= and Before= lines on the
// tree's units and the boot targets, which may make ordering cycles.
func (g *treeGen) orderings() string {
	if g.order.Float64() >= 0.3 {
		return ""
	}
	g.has(featOrder)
	var b strings.Builder
	for range 1 + g.order.IntN(2) {
		n := pickFrom(g.order, randomNames)
		if g.order.IntN(3) == 0 {
			n = pickFrom(g.order, orderTargets)
		}
		if unit.IsTemplate(n) {
			n = unit.WithInstance(n, "one")
		}
		fmt.Fprintf(&b, "%s=%s\n", pickFrom(g.order, []string{"After", "Before"}), n)
	}
	return b.String()
}

// randomImageSettings are the settings of a disk image under a device
// policy, which together Want the image modules (unit_patch_contexts),
// each kept or ignored by its parser.
var randomImageSettings = []string{
	"RootImage=/srv/r.raw\n", "RootImage=\n", "MountImages=/srv/m.raw:/mnt/m\n", "MountImages=/srv/m\\:x.raw:/mnt/m\n",
	"MountImages=rel:/mnt/m\n", "MountImages=/srv/m\\q:/mnt/m\n", "MountImages=\n", "PrivateDevices=yes\n", "PrivateDevices=maybe\n",
	"DevicePolicy=closed\n", "DevicePolicy=bogus\n", "DeviceAllow=/dev/null rw\n", "DeviceAllow=\n", "DeviceAllow=/tmp/x\n",
}

// randomWorkDirs are working directories below an API file system or
// beside one, which 257 refuses in a mount namespace (mountNSSettings).
var randomWorkDirs = []string{"/proc/x", "/sys/x", "-/dev/x", "/dev", "/procfoo", "/dev/x\nWorkingDirectory=", "/sys/x\nWorkingDirectory=-rel"}

// randomTree returns the changes seed makes to a Debian root.
func randomTree(seed uint64) ([]op, map[feature]bool) {
	g := &treeGen{r: rand.New(rand.NewPCG(seed, 0x626f6f74)), listen: rand.New(rand.NewPCG(seed, 0x6c697374)),
		image: rand.New(rand.NewPCG(seed, 0x696d6167)), workDir: rand.New(rand.NewPCG(seed, 0x77646972)),
		order: rand.New(rand.NewPCG(seed, 0x6f726472)), feats: map[feature]bool{}, needsMount: map[string]bool{}}
	if g.chance(0.8) {
		g.add(g.link(etcDir+"r-masked.service", "/dev/null"))
	}
	for _, n := range randomNames {
		d := g.dir()
		switch g.r.IntN(12) {
		case 0:
			g.add(g.link(d+n, "/dev/null"))
		case 1:
			g.add(g.file(d+n, "")) // an empty file masks too
		case 2:
			// not written: a name others may want or require
		default:
			g.add(g.file(d+n, g.unitFile(n)))
		}
		if g.chance(0.35) {
			// Sockets and timers in sockets.target.wants, and, drawn
			// apart (g.order), sometimes any unit: a service orders
			// after basic.target, which orders after sockets.target (a
			// target after what it pulls in), and systemd breaks that
			// cycle by deleting a job it picks in hash-table order (the
			// model reports the candidates, Boot.Uncertain).
			targets := []string{"multi-user.target", "multi-user.target", "r-t.target"}
			if t := unit.Type(n); t == "socket" || t == "timer" {
				targets = append(targets, "sockets.target")
			}
			target := g.pick(targets)
			if g.order.Float64() < 0.1 {
				g.has(featSocketsWants)
				target = "sockets.target"
			}
			link := d + n
			if unit.IsTemplate(n) {
				inst := "one"
				if g.chance(0.15) {
					inst = g.pick([]string{".", ".."})
				}
				n = unit.WithInstance(n, inst)
				g.has(featTemplate)
			}
			g.add(g.link(etcDir+target+".wants/"+n, link))
		}
	}
	// Aliases, enabled under their alias name.
	for i := range g.r.IntN(3) {
		alias := fmt.Sprintf("r-alias%d.service", i)
		target := g.pick(randomNames)
		if unit.Type(target) != "service" || unit.IsTemplate(target) {
			continue
		}
		g.has(featAlias)
		g.add(g.link(etcDir+alias, target), g.link(etcDir+"multi-user.target.wants/"+alias, etcDir+alias))
	}
	if g.chance(0.3) {
		g.has(featAlias)
		g.has(featTemplate)
		g.add(g.link(etcDir+"r-alias@.service", "r-g@.service"),
			g.link(etcDir+"multi-user.target.wants/r-alias@two.service", etcDir+"r-g@.service"))
	}
	// Drop-ins at name, prefix, template and type level.
	for range g.r.IntN(3) {
		where := g.pick([]string{"r-a.service.d/", "r-d-.service.d/", "r-.service.d/", "service.d/", "r-g@.service.d/", "r-g@one.service.d/", "r-t.target.d/"})
		key := g.pick([]string{"Wants", "Wants", "Upholds"})
		text := "[Unit]\n" + key + "=" + g.dep() + "\n"
		if g.chance(0.25) {
			// A bad line ends the drop-in's read: what follows it is lost.
			g.has(featDropinCut)
			lines := []string{"[Service]\nExecStartPost=" + g.command(strings.Contains(where, "@")) + "\n",
				"[Service]\nWorkingDirectory=rel\n", "[Service]\nPIDFile=rel/x\n", "Description=\xff\n",
				"[Service]\nDynamicUser=maybe\n"}
			if where != "service.d/" {
				// Not for every service: a namespace orders the
				// journal's early services after its socket, cycles
				// with many jobs systemd may delete, of which it picks
				// one in hash-table order (the model only marks them
				// uncertain).
				lines = append(lines, "[Service]\nLogNamespace=rns\n")
			}
			bad := g.pick(lines)
			text += bad + "[Unit]\nWants=" + g.dep() + "\n"
		}
		g.add(g.file(etcDir+where+fmt.Sprintf("%02d.conf", g.r.IntN(3)), text))
	}
	// Dependency directories of the tree's units.
	for range g.r.IntN(4) {
		kind := g.pick([]string{".wants", ".wants", ".requires", ".upholds"})
		owner := g.pick([]string{"r-a.service", "r-g@.service", "r-b.service", "r-t.target", "r-u.target"})
		if kind == ".requires" {
			// A .requires link of its own makes a second requirement
			// (see unitFile); r-t.target has none in its file.
			owner = "r-t.target"
		}
		n := g.dep()
		if kind == ".upholds" {
			g.has(featUpholds)
		}
		g.add(g.link(etcDir+owner+kind+"/"+n, etcDir+n))
	}
	if g.chance(0.4) {
		g.mountUnits()
	}
	// What default.target requires: masked or missing units directly,
	// through .requires/ and a drop-in, or the tree's units.
	if g.chance(0.2) {
		g.required++
		switch g.r.IntN(3) {
		case 0:
			// The link must not itself resolve to /dev/null: such a
			// .requires entry is skipped, not a dependency on a mask.
			g.has(featRequiresMasked)
			g.add(g.link(etcDir+"multi-user.target.requires/r-masked.service", libDir+"r-masked.service"),
				g.link(etcDir+"r-masked.service", "/dev/null"))
		case 1:
			g.has(featRequiresMissing)
			g.add(g.link(etcDir+"multi-user.target.requires/r-missing.service", etcDir+"r-missing.service"))
		default:
			g.add(g.link(etcDir+"multi-user.target.requires/"+g.pick(randomNames[:5]), etcDir+g.pick(randomNames[:5])))
		}
	}
	if g.required == 0 && g.chance(0.1) {
		g.required++
		g.add(g.file(etcDir+"multi-user.target.d/50-requires.conf", "[Unit]\nRequires="+g.dep()+"\n"))
	}
	// default.target: masked, missing, or another target; rescue.target
	// masked.
	if g.chance(0.15) {
		switch g.r.IntN(4) {
		case 0:
			g.has(featDefaultMasked)
			g.add(g.link(etcDir+"default.target", "/dev/null"))
		case 1:
			g.has(featDefaultMissing)
			g.add(systemdtest.Remove(libDir + "default.target"))
		case 2:
			g.has(featDefaultAlias)
			g.add(g.link(etcDir+"default.target", g.pick([]string{"r-t.target", "r-u.target", "multi-user.target"})))
		default:
			g.has(featDefaultAlias)
			g.add(g.link(etcDir+"default.target", libDir+"r-gone.target"))
		}
		if g.chance(0.3) {
			g.has(featRescueMasked)
			g.add(g.link(etcDir+"rescue.target", "/dev/null"))
		}
	}
	// /run: none of it exists when PID 1 loads units.
	if g.chance(0.6) {
		g.has(featRun)
		runDir := "/run/systemd/" + g.pick([]string{"system", "system", "transient", "generator", "generator.late", "system.control"}) + "/"
		g.add(g.file(runDir+"r-run.service", "[Service]\nExecStart=/bin/true\n"),
			g.link(runDir+"multi-user.target.wants/r-run.service", runDir+"r-run.service"))
		if g.chance(0.4) {
			g.add(g.link(runDir+"multi-user.target.requires/r-run-missing.service", "/nowhere"))
		}
		if g.chance(0.3) {
			g.add(g.link(runDir+"default.target", "/dev/null"))
		}
		if g.chance(0.3) {
			g.add(g.link(runDir+g.pick(randomNames[:5]), "/dev/null"))
		}
		if g.chance(0.3) {
			// A runtime copy of a unit, shadowing /usr/lib's if it were
			// seen: empty (a mask) or refused.
			g.add(g.file(runDir+g.pick(randomNames[:5]), g.pick([]string{"", "[Service]\nType=simple\n"})))
		}
		if g.chance(0.3) {
			g.add(g.file(runDir+"multi-user.target.d/50-run.conf", "[Unit]\nWants=r-run.service\nRequires=r-run-missing.service\n"))
		}
		if g.chance(0.3) {
			g.has(featVarRun)
			kind := ".wants"
			if g.required == 0 && g.chance(0.5) {
				g.required++
				kind = ".requires"
			}
			g.add(g.file("/run/r-viarun.service", "[Service]\nExecStart=/bin/true\n"),
				g.link(etcDir+"r-viarun.service", "/var/run/r-viarun.service"),
				g.link(etcDir+"multi-user.target"+kind+"/r-viarun.service", etcDir+"r-viarun.service"))
		}
	}
	return g.ops, g.feats
}

// oracleSeeds are the seeds TestOracleRandom compares.
func oracleSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("AMILINT_ORACLE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "AMILINT_ORACLE_SEED")
		return []uint64{n}
	}
	n := uint64(defaultOracleSeeds)
	if s := os.Getenv("AMILINT_ORACLE_SEEDS"); s != "" {
		var err error
		n, err = strconv.ParseUint(s, 10, 32)
		require.NoError(t, err, "AMILINT_ORACLE_SEEDS")
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i) + 1
	}
	return seeds
}

// tally counts agreement over many trees.
type tally struct {
	mu                            sync.Mutex
	trees, failed, fellBack       int
	units, agree                  int
	reruns, unsettled, mismatched int
	// cycles counts the trees where systemd logged an ordering cycle,
	// uncertain those where the model leaves units uncertain, loadOrder
	// those not compared for an ordering that depends on the order of
	// loading (loadOrdered).
	cycles, uncertain, loadOrder int
	feats                        map[feature]int
}

// outcome is one answer to "what does boot queue": the units started, or
// the failure reason, and the target fallen back to.
type outcome struct {
	start    []string
	failed   string
	fallback string
}

func (o outcome) equal(p outcome) bool {
	return slices.Equal(o.start, p.start) && o.failed == p.failed && o.fallback == p.fallback
}

func modelOutcome(b *Boot) outcome {
	o := outcome{start: b.Start}
	if b.Failure != nil {
		o.start, o.failed = nil, b.Failure.Reason
	}
	if b.Fallback != "" {
		o.fallback = RescueTarget
	}
	return o
}

func oracleOutcome(tr systemdtest.Transaction) outcome {
	o := outcome{start: tr.Start, failed: tr.Failed, fallback: tr.Fallback}
	if o.failed != "" {
		o.start = nil
	}
	return o
}

// TestOracleRandom compares the model with systemd 252 and 257 on seeded
// random trees stacked over each Debian root: units with every dependency
// kind and directory, masks, missing units, refused units, templates,
// aliases, drop-ins, masked and missing units that default.target requires
// directly and through .requires/, masked, missing and re-aliased
// default.target, a masked rescue.target, and /run content (which PID 1
// never sees). Every tree must agree unit by unit, and on whether and why
// the transaction fails and whether systemd falls back to rescue.target.
//
// Where systemd's own answer depends on the order it walks a hash table
// (which of several Requires= it adds before one fails), it differs from
// run to run: a tree whose first answer differs from the model's is run
// again, and the model must give one of systemd's answers.
func TestOracleRandom(t *testing.T) {
	seeds := oracleSeeds(t)
	runs := 10
	if k, err := strconv.Atoi(os.Getenv("AMILINT_ORACLE_REPEAT")); err == nil && k > 0 {
		runs = k
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			sd.Path(t) // fail (under CI) or skip once, not per tree
			tl := &tally{feats: map[feature]int{}}
			t.Run("trees", func(t *testing.T) {
				for _, seed := range seeds {
					t.Run(fmt.Sprint(seed), func(t *testing.T) {
						t.Parallel()
						compareRandomTree(t, sd, seed, runs, len(seeds) == 1, tl)
					})
				}
			})
			t.Logf("systemd %d: %d trees (%d fail the transaction, %d fall back to rescue.target); "+
				"%d of %d started units agree; %d trees needed reruns, %d where systemd disagrees with itself, %d mismatched; "+
				"%d with ordering cycles, %d where the model leaves units uncertain, %d not compared (ordering depends on the order of loading)",
				sd.Version, tl.trees, tl.failed, tl.fellBack, tl.agree, tl.units, tl.reruns, tl.unsettled, tl.mismatched, tl.cycles, tl.uncertain, tl.loadOrder)
			if len(seeds) < 100 {
				return
			}
			for _, f := range randomFeatures {
				assert.Positive(t, tl.feats[f], "no tree had %s", f)
			}
			assert.Positive(t, tl.failed, "no tree failed the transaction")
			assert.Positive(t, tl.fellBack, "no tree fell back to rescue.target")
			assert.Positive(t, tl.cycles, "no tree had an ordering cycle")
		})
	}
}

// loadOrdered reports whether the ordering among the jobs of start
// depends on the order systemd loaded their units in, which the model does
// not follow (unit_add_default_target_dependency: a target with default
// dependencies starts after a unit with default dependencies unless that
// unit is ordered after it already, or, for PartOf=, not loaded yet): two
// targets of start pull each other in, or a target of start is PartOf= a
// unit of start.
func loadOrdered(g *Graph, start []string) bool {
	has := func(a, b *Unit, kinds ...string) bool {
		return slices.ContainsFunc(a.Deps, func(d Dep) bool { return slices.Contains(kinds, d.Kind) && g.Unit(d.Name) == b })
	}
	for _, x := range start {
		ux := g.Unit(x)
		if unit.Type(x) != "target" || !defaultDeps(ux) {
			continue
		}
		for _, y := range start {
			uy := g.Unit(y)
			if x == y || !defaultDeps(uy) {
				continue
			}
			if has(ux, uy, "PartOf") || unit.Type(y) == "target" && has(ux, uy, targetPulls...) && has(uy, ux, targetPulls...) {
				return true
			}
		}
	}
	return false
}

// compareRandomTree compares one seed's tree on sd.
func compareRandomTree(t *testing.T, sd systemdtest.Systemd, seed uint64, runs int, verbose bool, tl *tally) {
	ops, feats := randomTree(seed)
	replay := fmt.Sprintf("replay: AMILINT_ORACLE_SEED=%d go test -count=1 -v -run 'TestOracleRandom/%d/' ./internal/systemd/boot", seed, sd.Version)
	describe := func() string {
		var b strings.Builder
		b.WriteString(replay + "\n")
		for _, o := range ops {
			switch {
			case o.Remove:
				fmt.Fprintf(&b, "  %s (removed)\n", o.Path)
			case o.Link != "":
				fmt.Fprintf(&b, "  %s -> %s\n", o.Path, o.Link)
			default:
				fmt.Fprintf(&b, "  %s: %q\n", o.Path, o.Text)
			}
		}
		return b.String()
	}
	if verbose {
		t.Log(describe())
	}
	v := newVariant(t, sd, ops)
	g := v.graph(t)
	b := g.Boot()
	// The units the model leaves uncertain (an ordering cycle systemd
	// breaks by deleting one of several jobs, picked in hash-table
	// order: those jobs, the jobs requiring them and, outside an
	// isolate, what only they pulled in) are compared on neither side.
	certain := func(o outcome) outcome {
		o.start = slices.DeleteFunc(slices.Clone(o.start), func(u string) bool { return slices.Contains(b.Uncertain, u) })
		return o
	}
	got := certain(modelOutcome(b))
	var deletable []string
	for _, c := range b.Cycles {
		deletable = append(deletable, c.Deletable...)
	}

	var first, want outcome
	var firstTr, wantTr systemdtest.Transaction
	var seen []outcome
	// A tree on which systemd has already disagreed with itself gets up
	// to six times the runs before the model's answer counts as none of
	// systemd's: an answer that comes one run in ten (seen for the
	// journal's namespace sockets, which a failing requirement may or may
	// not have pulled in first) is then missed once in a few thousand such
	// trees, not once in three.
	matched, tries, limit := false, 0, runs
	for i := 0; i < limit && !matched; i++ {
		if i == runs-1 && len(seen) > 1 {
			limit = 6 * runs
		}
		tries++
		tr := v.oracle(t)
		o := certain(oracleOutcome(tr))
		if i == 0 {
			first, firstTr = o, tr
		}
		if !slices.ContainsFunc(seen, o.equal) {
			seen = append(seen, o)
		}
		matched = o.equal(got)
		want, wantTr = o, tr
	}
	if !matched {
		want, wantTr = first, firstTr
	}
	// In the run that agrees (or the first), systemd finds an ordering
	// cycle, whichever job it deletes, exactly when the model does, and
	// deletes only jobs the model has as candidates (other runs may have
	// added jobs in another order, which differs from run to run); and the
	// orderings among the jobs both start are the same. A tree whose
	// ordering depends on the order systemd loaded the units in
	// (loadOrdered) is left out.
	loadOrder := loadOrdered(g, b.Start)
	// With Conflicts= among the jobs systemd may miss a cycle
	// (Cycle.Missable): it must not find one the model does not.
	missable := len(wantTr.Cycles) == 0 && slices.ContainsFunc(b.Cycles, func(c Cycle) bool { return c.Missable })
	if !loadOrder && !missable {
		if (len(wantTr.Cycles) > 0) != (len(b.Cycles) > 0) {
			t.Errorf("seed %d, systemd %d: systemd logged ordering cycles %v, the model found %+v\n%s", seed, sd.Version, wantTr.Cycles, b.Cycles, describe())
		}
		for _, d := range wantTr.CycleDeleted {
			if !slices.Contains(deletable, d) {
				t.Errorf("seed %d, systemd %d: systemd deleted %s to break an ordering cycle; the model's candidates: %+v\n%s", seed, sd.Version, d, b.Cycles, describe())
			}
		}
		if wantTr.Failed == "" && b.Failure == nil {
			compareOrder(t, g, wantTr, b.Start)
		}
	}

	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.trees++
	if len(wantTr.Cycles) > 0 {
		tl.cycles++
	}
	if len(b.Uncertain) > 0 {
		tl.uncertain++
	}
	for f := range feats {
		tl.feats[f]++
	}
	if want.failed != "" {
		tl.failed++
	}
	if want.fallback != "" {
		tl.fellBack++
	}
	if tries > 1 {
		tl.reruns++
	}
	if len(seen) > 1 {
		tl.unsettled++
	}
	all := append(slices.Clone(want.start), got.start...)
	sort.Strings(all)
	all = slices.Compact(all)
	tl.units += len(all)
	for _, u := range all {
		if slices.Contains(want.start, u) == slices.Contains(got.start, u) {
			tl.agree++
		}
	}
	if matched {
		if len(seen) > 1 {
			t.Logf("seed %d: systemd gave %d different answers in %d runs; the model's is one of them", seed, len(seen), tries)
		}
		return
	}
	if loadOrder {
		tl.loadOrder++
		t.Logf("seed %d, systemd %d: not compared: the ordering depends on the order of loading", seed, sd.Version)
		return
	}
	tl.mismatched++
	var answers strings.Builder
	for i, o := range seen {
		onlySystemd, onlyModel := diff(o.start, got.start)
		fmt.Fprintf(&answers, "  answer %d: failed=%q fallback=%q; only systemd starts %v, only the model %v\n", i+1, o.failed, o.fallback, onlySystemd, onlyModel)
	}
	t.Errorf("seed %d, systemd %d: the model failed=%q fallback=%q; systemd gave %d different answers in %d runs:\n%s%s",
		seed, sd.Version, got.failed, got.fallback, len(seen), tries, answers.String(), describe())
}
