package rules

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// Hardening is one entry of the hardening catalog (rules/hardening/ID.yaml):
// a drop-in that sandboxes a service as far as the service still works,
// with why that is safe for it and what would break it. `amilint fix
// --harden` writes it as /etc/systemd/system/UNIT.d/DropInName for each
// of its units the image has and enables, or its boot starts, or runs
// from a timer, socket or path unit its boot starts. Every shipped entry is proven by a real boot
// of a Debian root with it (the boot test of the catalog).
type Hardening struct {
	// ID is the entry's slug, also its file name (ID.yaml).
	ID string `yaml:"id" json:"id"`
	// Title says in one line what the entry does.
	Title string `yaml:"title" json:"title"`
	// Units are the service names it applies to (a unit and its aliases:
	// ssh.service, sshd.service), or templates (postfix@.service), whose
	// drop-in every instance reads; the drop-in goes to the first present
	// one that is enabled or runs at boot (for a template: an instance
	// of it).
	Units []string `yaml:"units" json:"units"`
	// Why says why the sandbox is safe for the service.
	Why string `yaml:"why" json:"why"`
	// Breaks says what would break with it.
	Breaks string `yaml:"breaks" json:"breaks"`
	// DropIn is the drop-in's text: [Service] (and [Unit]) settings, no
	// Exec*= command lines, no [Install].
	DropIn string `yaml:"dropin" json:"dropin"`
	// References are URLs.
	References []string `yaml:"references,omitempty" json:"references,omitempty"`
	// Disabled, in a user catalog (--harden-catalog), turns off the
	// shipped entry of the same id.
	Disabled bool `yaml:"disabled,omitempty" json:"disabled,omitempty"`

	Source string `yaml:"-" json:"-"`
}

// DropInName is the file name fix --harden gives every catalog drop-in.
const DropInName = "50-amilint-hardening.conf"

// maxDropIn bounds a catalog drop-in.
const maxDropIn = 64 << 10

// LoadHardening returns the shipped hardening catalog with the entries of
// each dir merged over it by id, later directories winning; an entry with
// disabled: true removes the entry of its id. Sorted by id.
func LoadHardening(dirs ...string) ([]Hardening, error) {
	hs, err := loadHardening(hardeningCatalog, "hardening", "embedded:hardening/")
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		fsys, err := userDir(d, "hardening catalog")
		if err != nil {
			return nil, err
		}
		user, err := loadHardening(fsys, ".", d+"/")
		if err != nil {
			return nil, err
		}
		hs = mergeBy(hs, user, func(h Hardening) string { return h.ID })
	}
	return slices.DeleteFunc(hs, func(h Hardening) bool { return h.Disabled }), nil
}

func loadHardening(fsys fs.FS, dir, prefix string) ([]Hardening, error) {
	files, errs, err := readCatalog(fsys, dir, prefix, "hardening catalog")
	if err != nil {
		return nil, err
	}
	var hs []Hardening
	for _, f := range files {
		var h Hardening
		if err := decodeStrict(f.data, &h); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.src, err))
			continue
		}
		h.Source = f.src
		var problems []error
		if h.ID != "" && h.ID != f.stem {
			problems = append(problems, fmt.Errorf("id %q does not match the file name %s", h.ID, f.name))
		}
		if err := errors.Join(append(problems, h.Validate())...); err != nil {
			errs = append(errs, prefixEach(f.src, err)...)
			continue
		}
		hs = append(hs, h)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("load hardening catalog: %w", err)
	}
	slices.SortFunc(hs, func(a, b Hardening) int { return strings.Compare(a.ID, b.ID) })
	return hs, nil
}

// maxFileName is NAME_MAX: the longest name of a file or directory.
const maxFileName = 255

// Validate reports every problem of the entry at once. A disabled entry
// needs only its id.
func (h Hardening) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(h.ID) > maxIDLen || !idPattern.MatchString(h.ID) {
		bad("id %q: want a lowercase slug like cron", h.ID)
	}
	if h.Disabled {
		return errors.Join(errs...)
	}
	if strings.TrimSpace(h.Title) == "" || strings.Contains(h.Title, "\n") {
		bad("title: want one line")
	}
	if strings.TrimSpace(h.Why) == "" {
		bad("why: missing (why the sandbox is safe for the service)")
	}
	if strings.TrimSpace(h.Breaks) == "" {
		bad("breaks: missing (what would break with it)")
	}
	if len(h.Units) == 0 {
		bad("units: name at least one service")
	}
	for _, u := range h.Units {
		if _, inst := unit.Instance(u); !unit.Valid(u) || unit.Type(u) != "service" || inst {
			bad("unit %q: want a service or template name (no instance)", u)
		} else if len(u)+len(".d") > maxFileName {
			// Its drop-in directory, NAME.d, could not be created (and
			// systemd could not read one).
			bad("unit %q: %d characters; its drop-in directory's name would be longer than %d", u, len(u), maxFileName)
		}
	}
	for _, err := range dropInProblems(h.DropIn) {
		errs = append(errs, fmt.Errorf("dropin: %w", err))
	}
	return errors.Join(errs...)
}

// dropInProblems checks a drop-in: it parses as systemd parses unit files,
// sets something, only in [Service] or [Unit], and runs no commands.
func dropInProblems(text string) []error {
	if len(text) > maxDropIn {
		return []error{fmt.Errorf("larger than %d bytes", maxDropIn)}
	}
	opts, err := unit.ParseConfig([]byte(text))
	if err != nil {
		return []error{err}
	}
	var errs []error
	if len(opts) == 0 {
		errs = append(errs, errors.New("sets nothing"))
	}
	for _, o := range opts {
		switch {
		case o.Section != "Service" && o.Section != "Unit":
			errs = append(errs, fmt.Errorf("[%s] %s=: a hardening drop-in sets only [Service] and [Unit]", o.Section, o.Name))
		case strings.HasPrefix(o.Name, "Exec"):
			errs = append(errs, fmt.Errorf("%s=: a hardening drop-in runs no commands", o.Name))
		}
	}
	return errs
}

// HardeningMarkdown renders the documentation page of a catalog entry
// (rules/docs/hardening/ID.md; a test keeps them in step).
func HardeningMarkdown(h Hardening) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Hardening: %s\n\n**%s**\n\n", h.ID, h.Title)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| units | %s |\n| drop-in | `/etc/systemd/system/UNIT.d/%s` |\n", codeList(h.Units), DropInName)
	b.WriteString("\n## What it sets\n\n```ini\n" + strings.TrimSpace(h.DropIn) + "\n```\n")
	fmt.Fprintf(&b, "\n## Why it is safe for this service\n\n%s\n", strings.TrimSpace(h.Why))
	fmt.Fprintf(&b, "\n## What would break it\n\n%s\n", strings.TrimSpace(h.Breaks))
	b.WriteString("\n## Proof\n\nThe boot test of the hardening catalog (`make e2e-harden`) boots the Debian 12\n" +
		"roots (the base one, and one with Postfix and PostgreSQL) under\n" +
		"systemd-nspawn twice each, plain and with `amilint fix --harden`, and\n" +
		"requires this service (when the root has it) to reach the same state in both\n" +
		"boots, and no unit to fail that did not fail before; it also requires\n" +
		"systemd-analyze security to score the service lower with the drop-in.\n")
	if len(h.References) > 0 {
		b.WriteString("\n## References\n\n")
		for _, r := range h.References {
			fmt.Fprintf(&b, "- <%s>\n", r)
		}
	}
	fmt.Fprintf(&b, "\n<!-- Generated from rules/hardening/%s.yaml by `go test ./rules -update`; do not edit. -->\n", h.ID)
	return b.String()
}

// HardeningIndex renders rules/docs/hardening/README.md.
func HardeningIndex(hs []Hardening) string {
	var b strings.Builder
	b.WriteString("# amilint hardening catalog\n\n")
	b.WriteString("One YAML file per entry in `rules/hardening/`; `amilint fix DIR --harden` writes each entry's\n")
	b.WriteString("drop-in for the services of the image that are present and enabled, or started at boot, or run\n")
	b.WriteString("by a timer, socket or path unit the boot starts.\n\n")
	b.WriteString("| entry | units | title |\n|---|---|---|\n")
	for _, h := range hs {
		fmt.Fprintf(&b, "| [%s](%s.md) | %s | %s |\n", h.ID, h.ID, codeList(h.Units), h.Title)
	}
	b.WriteString("\n<!-- Generated by `go test ./rules -update`; do not edit. -->\n")
	return b.String()
}
