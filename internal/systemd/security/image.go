package security

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/version"
)

// PolicyFile is the name systemd-analyze looks up in its configuration
// directories when no --security-policy is given.
const PolicyFile = "systemd-analyze-security.policy"

// policyDirs are CONF_PATHS("systemd"), in precedence order.
var policyDirs = []string{"etc/systemd", "run/systemd", "usr/local/lib/systemd", "usr/lib/systemd", "lib/systemd"}

// ImagePolicy reads the image's own systemd-analyze-security.policy, the
// first of its configuration directories that has one. It returns nil and
// "" when the image has none.
func ImagePolicy(fsys *rootfs.FS) (*Policy, string, error) {
	for _, d := range policyDirs {
		name := d + "/" + PolicyFile
		b, err := fsys.ReadFile(name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) || errors.Is(err, rootfs.ErrMasked) {
				continue
			}
			return nil, "", fmt.Errorf("read /%s: %w", name, err)
		}
		p, err := ParsePolicy(b)
		if err != nil {
			return nil, "", fmt.Errorf("/%s: %w", name, err)
		}
		return p, "/" + name, nil
	}
	return nil, "", nil
}

// Options say how ScoreImage scores an image.
type Options struct {
	// Systemd is the version to score as; zero detects the image's.
	Systemd version.Info
	// Policy overrides the image's own policy file when set.
	Policy *Policy
	// PolicySource names where Policy came from.
	PolicySource string
	// Units are the services to score; empty scores every service.
	Units []string
	// Graph is the image's loaded unit model, if the caller has one.
	Graph *boot.Graph
}

// Report is the assessment of an image's services.
type Report struct {
	// Systemd is the version the image ships (or the override).
	Systemd version.Info `json:"systemd"`
	// Tables is the version whose tables scored it: Systemd's, or the
	// nearest amilint carries (see TablesFor).
	Tables int `json:"tables"`
	// Policy is where the security policy came from ("" for none).
	Policy string `json:"policy,omitempty"`
	// PolicyIgnored lists what systemd ignores in that policy.
	PolicyIgnored []string `json:"policy_ignored,omitempty"`
	// Units are the services, in the order asked (sorted for a whole image).
	Units []Result `json:"units"`
}

// Result is one service's assessment, or why it has none.
type Result struct {
	Unit  string `json:"unit"`
	Error string `json:"error,omitempty"`
	// Err is the error behind Error (ErrNotLoaded, ErrNotService, …).
	Err error `json:"-"`
	*Assessment
}

// ScoreImage scores the services of an image. The tables, the image's
// policy and the unit model are read concurrently, and units
// are scored while the next ones load: a whole image costs about what
// loading its services costs.
func ScoreImage(fsys *rootfs.FS, opts Options) (*Report, error) {
	sv := opts.Systemd
	if sv.Major == 0 {
		var err error
		if sv, err = version.Detect(fsys); err != nil {
			return nil, fmt.Errorf("read systemd version: %w", err)
		}
	}
	var (
		t   *Tables
		p   = opts.Policy
		src = opts.PolicySource
		g   = opts.Graph
		eg  errgroup.Group
	)
	eg.Go(func() error {
		var err error
		t, err = TablesFor(sv.Major)
		return err
	})
	if p == nil {
		eg.Go(func() error {
			var err error
			p, src, err = ImagePolicy(fsys)
			return err
		})
	}
	if g == nil {
		eg.Go(func() error {
			var err error
			if g, err = boot.Load(fsys, sv.Major); err != nil {
				return fmt.Errorf("load units: %w", err)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	s := NewScorer(fsys, g, t, p)
	r := &Report{Systemd: sv, Tables: t.Version, Policy: src, Units: []Result{}}
	if p != nil {
		r.PolicyIgnored = p.Ignored
	}
	whole := len(opts.Units) == 0
	names := opts.Units
	if whole {
		names = s.candidates()
	}
	// One goroutine loads units in order (the graph loads one at a time);
	// workers score the loaded ones.
	results := make([]Result, len(names))
	keep := make([]bool, len(names))
	loaded := make(chan int, len(names))
	go func() {
		defer close(loaded)
		for i, n := range names {
			if whole && !s.scorable(n) {
				continue
			}
			keep[i] = true
			loaded <- i
		}
	}()
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range loaded {
				a, err := s.Score(names[i])
				results[i] = Result{Unit: names[i], Assessment: a, Err: err}
				if err != nil {
					results[i].Error = err.Error()
				}
			}
		}()
	}
	wg.Wait()
	for i, res := range results {
		if keep[i] {
			r.Units = append(r.Units, res)
		}
	}
	return r, nil
}
