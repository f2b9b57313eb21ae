package security

import (
	"errors"
	"fmt"
	"io/fs"

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

// ScoreImage scores the services of an image.
func ScoreImage(fsys *rootfs.FS, opts Options) (*Report, error) {
	sv := opts.Systemd
	if sv.Major == 0 {
		var err error
		if sv, err = version.Detect(fsys); err != nil {
			return nil, fmt.Errorf("read systemd version: %w", err)
		}
	}
	t, err := TablesFor(sv.Major)
	if err != nil {
		return nil, err
	}
	p, src := opts.Policy, opts.PolicySource
	if p == nil {
		if p, src, err = ImagePolicy(fsys); err != nil {
			return nil, err
		}
	}
	g := opts.Graph
	if g == nil {
		// systemd-analyze reads the tree as it is, /run included.
		if g, err = boot.LoadTree(fsys, sv.Major); err != nil {
			return nil, fmt.Errorf("load units: %w", err)
		}
	}
	s := NewScorer(fsys, g, t, p)
	r := &Report{Systemd: sv, Tables: t.Version, Policy: src, Units: []Result{}}
	if p != nil {
		r.PolicyIgnored = p.Ignored
	}
	names := opts.Units
	if len(names) == 0 {
		names = s.Services()
	}
	for _, n := range names {
		a, err := s.Score(n)
		res := Result{Unit: n, Assessment: a, Err: err}
		if err != nil {
			res.Error = err.Error()
		}
		r.Units = append(r.Units, res)
	}
	return r, nil
}
