package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/image/target"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// unitsSchema versions the JSON of `amilint units -o json`.
const unitsSchema = "amilint/v1"

// unitsDoc is the JSON document of `amilint units -o json`.
type unitsDoc struct {
	Schema string `json:"schema"`
	Target string `json:"target"`
	// FirstBoot says systemd will apply presets to every unit at the
	// image's first boot (its /etc/machine-id is missing, unreadable or
	// "uninitialized"; an empty one is not a first boot).
	FirstBoot bool       `json:"first_boot"`
	Units     []unitJSON `json:"units"`
}

// unitJSON is one unit file.
type unitJSON struct {
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Path     string   `json:"path"`
	Fragment string   `json:"fragment,omitempty"`
	DropIns  []string `json:"dropins,omitempty"`
	Aliases  []string `json:"aliases,omitempty"`
	// Preset is what the image's preset files say: "enable" or "disable".
	Preset string `json:"preset"`
	// Error says why the state is "bad".
	Error string `json:"error,omitempty"`

	// Boot reachability from internal/systemd/boot (see withBoot): whether the
	// initial transaction starts the unit, the started units that
	// activate it (sockets, timers, paths), and the chain from
	// default.target that explains either.
	StartsAtBoot *bool       `json:"starts_at_boot,omitempty"`
	ActivatedBy  []string    `json:"activated_by,omitempty"`
	Chain        []unit.Edge `json:"chain,omitempty"`
}

// runUnits implements `amilint units TARGET [-o text|tsv|json]`: the unit
// files of an image with their enablement state, as
// `systemctl --root=TARGET list-unit-files` would list them.
func runUnits(e *env, args []string) int {
	fs := newFlags(e, "units")
	out := fs.String("o", "text", "output format: text, tsv or json")
	var disk diskFlags
	disk.register(fs)
	var model modelFlags
	model.register(fs)
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint units TARGET [-o text|tsv|json] [--systemd-version N] [--partition N] [--backing FILE] [--allow-corrupt]")
	}
	if err != nil {
		return fail(e, "units", err)
	}
	switch {
	case len(pos) == 0:
		return fail(e, "units", errors.New("missing TARGET"))
	case len(pos) > 1:
		return fail(e, "units", fmt.Errorf("one TARGET expected, got %d", len(pos)))
	}
	switch *out {
	case "text", "tsv", "json":
	default:
		return fail(e, "units", fmt.Errorf("unknown output format %q (want text, tsv or json)", *out))
	}
	im, err := openSpec(e, pos[0], disk)
	if err != nil {
		return fail(e, "units", err)
	}
	defer im.Close()
	w := bufio.NewWriter(e.stdout)
	switch *out {
	case "json":
		err = writeUnitsJSON(w, im, model.opts)
	default:
		err = writeUnitFiles(w, im.FS, *out, model.opts)
	}
	if err == nil {
		// A damaged image is not listed as an intact one, even where the
		// listing went on as systemd's does (an unreadable directory).
		if err = rootfs.Damaged(im.FS); err == nil {
			err = w.Flush()
		}
	}
	if err != nil {
		return fail(e, "units", fmt.Errorf("%s: %w", pos[0], err))
	}
	warnCorrupt(e, im)
	return ExitOK
}

// writeUnitFiles writes the list-unit-files view: tsv, or the text table
// with the preset column.
func writeUnitFiles(w io.Writer, fsys *rootfs.FS, format string, opts audit.ModelOptions) error {
	sv, err := opts.Version(fsys)
	if err != nil {
		return err
	}
	units, err := install.List(fsys, sv.Major)
	if err != nil {
		return fmt.Errorf("list unit files: %w", err)
	}
	if format == "tsv" {
		return writeUnitsTSV(w, units)
	}
	presets, err := install.LoadPresets(fsys, sv.Major)
	if err != nil {
		return fmt.Errorf("read presets: %w", err)
	}
	return writeUnitsText(w, units, presets)
}

// writeUnitsJSON writes the unit files with their boot reachability, from
// the same join scan uses (audit.Model): whether the initial transaction
// starts each unit, the started units that activate it, and the chain from
// default.target that explains either.
func writeUnitsJSON(w io.Writer, im *target.Image, opts audit.ModelOptions) error {
	inv, err := audit.Model(im.FS, opts)
	if err != nil {
		return err
	}
	doc := unitsDoc{Schema: unitsSchema, Target: im.Name, FirstBoot: inv.FirstBoot, Units: []unitJSON{}}
	for _, u := range inv.Files {
		starts := inv.Boot.StartsAtBoot(u.Name)
		j := unitJSON{Name: u.Name, State: string(u.State), Path: u.Path, Fragment: u.Fragment,
			DropIns: u.DropIns, Aliases: u.Aliases, Preset: string(inv.Presets[u.Name]),
			StartsAtBoot: &starts, ActivatedBy: inv.Boot.ActivatedBy[u.Name], Chain: inv.Boot.Chain(u.Name)}
		if u.Err != nil {
			j.Error = u.Err.Error()
		}
		doc.Units = append(doc.Units, j)
	}
	return report.WriteJSON(w, doc, true)
}

// writeUnitsTSV prints UNIT<TAB>STATE per unit, sorted by name.
func writeUnitsTSV(w io.Writer, units []install.UnitFile) error {
	for _, u := range units {
		if _, err := fmt.Fprintf(w, "%s\t%s\n", u.Name, u.State); err != nil {
			return err
		}
	}
	return nil
}

// writeUnitsText prints an aligned table and a count line, like
// systemctl list-unit-files.
func writeUnitsText(w io.Writer, units []install.UnitFile, presets *install.Presets) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT FILE\tSTATE\tPRESET")
	for _, u := range units {
		preset := "-"
		if u.State.ShowsPreset() {
			preset = string(presets.Query(u.Name))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, u.State, preset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d unit files listed.\n", len(units))
	return err
}
