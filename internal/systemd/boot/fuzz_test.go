package boot

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// genTree turns fuzz bytes into a unit tree: every byte pair is one entry
// (a unit file with dependency lines, an alias or mask link, a .wants or
// .requires link, a drop-in) over a small name space, so cycles, alias
// loops, templates and masks are dense.
func genTree(data []byte) fstest.MapFS {
	names := []string{"default.target", "a.service", "b.service", "c.target", "d.socket", "d.service",
		"e.timer", "e.service", "t@.service", "t@x.service", "f-g.service", "sysinit.target", "h.slice", "m.mount"}
	dirs := []string{"etc/systemd/system/", "usr/lib/systemd/system/", "run/systemd/system/"}
	keys := []string{"Wants", "Requires", "Requisite", "BindsTo", "Upholds", "PartOf", "Conflicts"}
	m := fstest.MapFS{"lib": mlink("usr/lib")}
	name := func(b byte) string { return names[int(b)%len(names)] }
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i], data[i+1]
		dir := dirs[int(op>>4)%len(dirs)]
		n := name(op)
		switch op % 6 {
		case 0: // a unit file
			var b strings.Builder
			b.WriteString("[Unit]\n")
			fmt.Fprintf(&b, "%s=%s %%p-%%i.service\n", keys[int(arg)%len(keys)], name(arg>>3))
			if arg&1 != 0 {
				b.WriteString("DefaultDependencies=no\n")
			}
			fmt.Fprintf(&b, "%s=%s\n", []string{"After", "Before"}[arg>>1&1], name(arg>>2))
			fmt.Fprintf(&b, "[Service]\nExecStart=/bin/x\nSlice=%s\n", name(arg>>2))
			fmt.Fprintf(&b, "[Socket]\nListenStream=1\nService=%s\n[Timer]\nOnBootSec=1\nUnit=%s\n", name(arg>>1), name(arg>>4))
			m[dir+n] = mfile(b.String())
		case 1: // an alias, possibly a cycle
			m[dir+n] = mlink(name(arg))
		case 2: // a mask or a link out of the search path
			targets := []string{"/dev/null", "/opt/x.service", "../../../../etc/shadow", "/proc/self/root/etc", ""}
			if t := targets[int(arg)%len(targets)]; t != "" {
				m[dir+n] = mlink(t)
			} else {
				m[dir+n] = mfile("")
			}
		case 3: // a .wants or .requires link
			suffix := []string{".wants/", ".requires/", ".upholds/"}[int(arg)%3]
			m[dir+n+suffix+name(arg>>2)] = mlink("/" + dir + name(arg>>2))
		case 4: // a drop-in
			m[dir+n+".d/"+fmt.Sprintf("%02d.conf", arg%7)] = mfile(fmt.Sprintf("[Unit]\nWants=%s\nWants=\n%s=%s\n", name(arg>>3),
				[]string{"After", "Before"}[arg&1], name(arg>>3)))
		case 5: // a link to a directory, or a directory where a file is expected
			m[dir+n+".d"] = mlink("/" + dir + name(arg) + ".d")
		}
	}
	m["opt/x.service"] = mfile(svc0)
	m["etc/shadow"] = mfile("secret")
	return m
}

// checkGraph asserts what must hold for any tree: every started unit is
// loaded, every chain starts at default.target and is connected. Chains
// are checked for every 1 in step units, as each costs its length.
func checkGraph(t *testing.T, g *Graph, step int) {
	b := g.Boot()
	for _, c := range b.Cycles {
		if len(c.Units) < 2 {
			t.Fatalf("a cycle of one job: %+v", c)
		}
		for _, d := range c.Deletable {
			if !slices.Contains(c.Units, d) {
				t.Fatalf("candidate %s is not in its cycle %+v", d, c)
			}
		}
		for _, d := range c.Deleted {
			if b.StartsAtBoot(d) {
				t.Fatalf("%s was deleted for a cycle but starts", d)
			}
		}
	}
	if b.Failure != nil && len(b.Failure.Cycle) > 0 && len(b.Cycles) == 0 {
		t.Fatalf("a cyclic transaction without cycles: %+v", b.Failure)
	}
	for _, u := range b.Uncertain {
		if !b.StartsAtBoot(u) {
			t.Fatalf("uncertain %s does not start", u)
		}
	}
	if b.Err != nil {
		return
	}
	for i, name := range append(append([]string{}, b.Start...), b.Activated...) {
		if i%step != 0 {
			continue
		}
		chain := b.Chain(name)
		u := g.Unit(name)
		if u == nil || u.State != Loaded {
			t.Fatalf("%s starts but is not loaded: %+v", name, u)
		}
		if len(chain) == 0 {
			continue
		}
		if chain[0].From != DefaultTarget {
			t.Fatalf("chain of %s starts at %s", name, chain[0].From)
		}
		for i := 1; i < len(chain); i++ {
			if chain[i].From != chain[i-1].To {
				t.Fatalf("chain of %s is broken at %d: %+v", name, i, chain)
			}
		}
		if last := chain[len(chain)-1].To; g.Unit(last).Name != name {
			t.Fatalf("chain of %s ends at %s", name, last)
		}
	}
	for _, n := range g.Names() {
		if g.Unit(n) == nil {
			t.Fatalf("listed name %s does not load", n)
		}
	}
	// ChainEdges counts exactly the edges the chains hold, names asked
	// twice and names without a chain included.
	names := slices.Concat(b.Start, b.Activated, g.Names(), b.Start, []string{"no-such.service"})
	want := 0
	for _, n := range names {
		want += len(b.Chain(n))
	}
	if got := b.ChainEdges(names); got != want {
		t.Fatalf("ChainEdges = %d, the chains hold %d edges", got, want)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x03, 0x0b, 0x16, 0x20, 0x31, 0x01})
	f.Add([]byte{0x01, 0x01, 0x02, 0x02, 0x13, 0x05, 0x24, 0x09, 0x35, 0x07})
	f.Add([]byte{0x01, 0x02, 0x11, 0x01, 0x21, 0x00, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		g, err := Load(rootfs.New(genTree(data)), 0)
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		checkGraph(t, g, 1)
	})
}

// TestLoadRandomTrees runs the generator over seeded random inputs, so the
// invariants are checked on many trees in every `go test`.
func TestLoadRandomTrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		data := make([]byte, 2+r.IntN(120))
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		g, err := Load(rootfs.New(genTree(data)), 0)
		require.NoError(t, err)
		checkGraph(t, g, 1)
	}
}

// TestLoadScale builds the shapes that break naive loaders: a long Wants=
// chain, a huge .wants fan-out, an alias chain past systemd's 64 hops and
// an alias cycle.
func TestLoadScale(t *testing.T) {
	const chain, fan = 5000, 5000
	m := fstest.MapFS{
		lib + "default.target": mfile("[Unit]\nWants=c0.service\n"),
		lib + "sysinit.target": mfile("[Unit]\n"),
	}
	// Explicit directories: fstest.MapFS synthesizes missing ones by
	// scanning every entry, which would make this test measure the fake.
	for _, d := range []string{"usr", "usr/lib", "usr/lib/systemd", lib, lib + "default.target.wants",
		"etc", "etc/systemd", etc} {
		m[strings.TrimSuffix(d, "/")] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
	}
	for i := range chain {
		m[fmt.Sprintf("%sc%d.service", lib, i)] = mfile(fmt.Sprintf("[Unit]\nWants=c%d.service\n%s", i+1, svc0))
	}
	for i := range fan {
		n := fmt.Sprintf("f%d.service", i)
		m[lib+n] = mfile(svc0)
		m[lib+"default.target.wants/"+n] = mlink("../" + n)
	}
	// al0 -> al1 -> ... -> al69 -> real.service: 70 hops, more than 64.
	for i := range 70 {
		m[fmt.Sprintf("%sal%d.service", etc, i)] = mlink(fmt.Sprintf("al%d.service", i+1))
	}
	m[etc+"al70.service"] = mlink("real.service")
	m[etc+"real.service"] = mfile(svc0)
	m[etc+"cy1.service"] = mlink("cy2.service")
	m[etc+"cy2.service"] = mlink("cy1.service")
	m[lib+"default.target.wants/al0.service"] = mlink("/x")
	m[lib+"default.target.wants/al10.service"] = mlink("/x")
	m[lib+"default.target.wants/cy1.service"] = mlink("/x")

	g, err := Load(rootfs.New(m), 0)
	require.NoError(t, err)
	b := g.Boot()
	require.NoError(t, b.Err)
	// default.target, sysinit.target, chain-1 loaded links of the chain
	// (c5000 has no file), the fan-out and real.service through al10.
	assert.Len(t, b.Start, 2+chain+fan+1)
	assert.Len(t, b.Chain(fmt.Sprintf("c%d.service", chain-1)), chain)
	assert.Equal(t, NotFound, g.Unit("al0.service").State, "alias chain longer than 64 hops")
	assert.Equal(t, "real.service", g.Unit("al10.service").Name)
	assert.Equal(t, NotFound, g.Unit("cy1.service").State)
	assert.True(t, unit.Valid("al0.service"))
	checkGraph(t, g, 97)
}
