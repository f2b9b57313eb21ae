package live

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// maxSamples bounds the audits a tracker remembers: enough to see restarts
// and zombie growth move together, few enough to follow a fleet's changes.
const maxSamples = 20

// tracker attributes memory-cgroup growth to the service whose restarts
// track it, over the last audits of one Auditor (the exporter audits every
// interval; a one-shot audit has a single sample).
type tracker struct {
	samples []attrSample
}

// attrSample is one audit interval: how much the zombie count grew and how
// often each service restarted.
type attrSample struct {
	zombies  int
	restarts map[string]int
}

func (t *tracker) add(zombies int, restarts map[string]int) {
	t.samples = append(t.samples, attrSample{zombies: zombies, restarts: restarts})
	if len(t.samples) > maxSamples {
		t.samples = slices.Delete(t.samples, 0, len(t.samples)-maxSamples)
	}
}

// attribution is a unit the zombie growth is pinned on, and why.
type attribution struct {
	unit string
	why  string
}

// services returns every service that restarted in a kept interval, sorted.
func (t *tracker) services() []string {
	names := map[string]bool{}
	for _, s := range t.samples {
		for n := range s.restarts {
			names[n] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// correlated returns the service whose restarts track the zombie growth:
// over three or more intervals, the one whose restart counts correlate
// best (Pearson r ≥ 0.7) with the zombie growth.
func (t *tracker) correlated() (attribution, bool) {
	if len(t.samples) < 3 {
		return attribution{}, false
	}
	ys := make([]float64, len(t.samples))
	grew := 0
	for i, s := range t.samples {
		ys[i] = float64(s.zombies)
		grew += s.zombies
	}
	var top attribution
	topR := 0.7
	for _, n := range t.services() {
		xs := make([]float64, len(t.samples))
		restarts := 0
		for i, s := range t.samples {
			xs[i] = float64(s.restarts[n])
			restarts += s.restarts[n]
		}
		if r, ok := pearson(xs, ys); ok && r >= topR {
			topR = r
			top = attribution{n, fmt.Sprintf("its restarts track the zombie growth over the last %d audits (r=%.2f: %d restarts, %d new zombie memory cgroups)",
				len(t.samples), r, restarts, grew)}
		}
	}
	return top, top.unit != ""
}

// explained returns, within the latest interval alone, the service whose
// restarts account for the zombie growth: systemd removes a service's
// memory cgroup when its processes are gone, so r restarts of a service
// that leaves page cache behind make about r zombies. It is the service
// that restarted most, if its restarts are at least half the growth.
func (t *tracker) explained() (attribution, bool) {
	a, ok := t.latest()
	if !ok {
		return attribution{}, false
	}
	last := t.samples[len(t.samples)-1]
	if 2*last.restarts[a.unit] < last.zombies {
		return attribution{}, false
	}
	a.why = fmt.Sprintf("its restarts account for the zombie growth: it restarted %d times while the zombie count grew by %d", last.restarts[a.unit], last.zombies)
	return a, true
}

// latest returns, within the latest interval alone, the service that
// restarted most while the zombies grew.
func (t *tracker) latest() (attribution, bool) {
	if len(t.samples) == 0 {
		return attribution{}, false
	}
	last := t.samples[len(t.samples)-1]
	if last.zombies <= 0 {
		return attribution{}, false
	}
	var top attribution
	most := 0
	for _, n := range slices.Sorted(maps.Keys(last.restarts)) {
		if r := last.restarts[n]; r > most {
			most = r
			top = attribution{n, fmt.Sprintf("it restarted %d times while the zombie count grew by %d", r, last.zombies)}
		}
	}
	return top, most > 0
}

// pearson is the correlation of xs and ys; ok is false when either does
// not vary.
func pearson(xs, ys []float64) (float64, bool) {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0, false
	}
	return sxy / math.Sqrt(sxx*syy), true
}
