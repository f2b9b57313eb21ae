package live

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The split evaluation: the live rule family alone (liveQuery), and every
// other family (an engine without liveFamily). Their union is the entry
// point (data.amilint.findings gathers the findings of every family), so
// the split changes no finding.
const (
	liveFamily = "live"
	liveQuery  = "data.amilint.rules." + liveFamily + ".findings"
)

// split evaluates a live document as two halves. The static rule families
// read the static facts and, of the overlay, only what NewDocument changes
// in them (active_at_boot of the units active now, the facts of units only
// the manager knows); their findings are cached per static document and
// overlay key (a few keys), so a steady audit evaluates them again only
// when the overlay becomes a new one. The live family reads the live section and each unit's runtime
// state; it runs every audit over a small input (liveInput), not the whole
// document.
type split struct {
	static *policy.Engine
	live   *policy.Engine

	mu       sync.Mutex
	cacheDoc *facts.Document
	cached   map[string][]finding.Finding // by overlay key, for cacheDoc
}

// maxOverlays bounds the overlays whose static findings are kept: a unit
// flapping between running and not (a crash loop of a unit the static
// model does not start, a timer's service) alternates a few keys.
const maxOverlays = 8

// liveInput is what the live family reads: the live section and, per
// unit, its type, chain and runtime state.
type liveInput struct {
	Units map[string]liveUnit `json:"units"`
	Live  *Facts              `json:"live"`
}

type liveUnit struct {
	Type  string      `json:"unit_type"`
	Chain []unit.Edge `json:"chain"`
	*Runtime
}

// overlayKey names what NewDocument changed in the static units of doc:
// the units whose active_at_boot it set and the units it added. Two
// documents over the same static facts with the same key give the static
// families the same input.
func overlayKey(doc *Document) string {
	var parts []string
	for name, u := range doc.Units {
		if u.Runtime == nil {
			continue
		}
		s, ok := doc.Document.Units[name]
		switch {
		case !ok:
			parts = append(parts, "+"+name+"\x00"+u.State+"\x00"+u.Restart+"\x00"+strconv.FormatBool(u.SpawnsContainer))
		case s.ActiveAtBoot != u.ActiveAtBoot:
			parts = append(parts, "*"+name)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}

// liveCandidate tells whether the live family may report u: a unit with
// runtime state that creates a container per start, or a loaded service
// not stopped with any sign of restarting (live.rego's crash-loop
// reasons, with any restart count: the threshold is at least 1). It is a
// superset of the units the family's unit rules match, so leaving the
// others out of the live input changes no finding; the zombie rule reads
// only the suspect's chain, which evaluate adds.
func liveCandidate(u *Unit) bool {
	rt := u.Runtime
	if rt == nil {
		return false
	}
	if rt.ContainerPerRestart {
		return true
	}
	return u.Type == "service" && rt.LoadState == "loaded" && rt.ActiveState != "inactive" &&
		(rt.SubState == "auto-restart" || rt.Result == "start-limit-hit" || rt.NRestarts > 0 || rt.RestartsGrowth > 0)
}

// evaluate returns the findings of every family over doc, as one
// evaluation of the entry point would.
func (s *split) evaluate(ctx context.Context, doc *Document) ([]finding.Finding, error) {
	key := overlayKey(doc)
	s.mu.Lock()
	var static []finding.Finding
	if s.cacheDoc == doc.Document {
		static = s.cached[key]
	}
	s.mu.Unlock()
	if static == nil {
		fs, err := s.static.Evaluate(ctx, doc)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.cacheDoc != doc.Document || len(s.cached) >= maxOverlays {
			s.cacheDoc, s.cached = doc.Document, map[string][]finding.Finding{}
		}
		s.cached[key] = fs
		s.mu.Unlock()
		static = fs
	}
	in := liveInput{Units: map[string]liveUnit{}, Live: doc.Live}
	suspect := ""
	if doc.Live != nil && doc.Live.Cgroups != nil {
		suspect = doc.Live.Cgroups.Suspect
	}
	for name, u := range doc.Units {
		if name == suspect || liveCandidate(u) {
			in.Units[name] = liveUnit{Type: u.Type, Chain: u.Chain, Runtime: u.Runtime}
		}
	}
	lf, err := s.live.Evaluate(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]finding.Finding, 0, len(static)+len(lf))
	out = append(append(out, static...), lf...)
	slices.SortStableFunc(out, func(a, b finding.Finding) int {
		return cmp.Or(
			strings.Compare(a.RuleID, b.RuleID),
			strings.Compare(a.Unit, b.Unit),
			strings.Compare(a.Message, b.Message),
		)
	})
	return out, nil
}
