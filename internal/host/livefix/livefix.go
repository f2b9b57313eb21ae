// Package livefix owns changing a running systemd's units over D-Bus, the
// live counterpart of package fix: it disables or masks unit files
// (DisableUnitFiles, MaskUnitFiles), reloads the manager, stops the
// units still running and resets their failed state, as `systemctl disable
// --now` or `mask --now` followed by `systemctl reset-failed` do.
//
// It only calls those five manager methods and reads unit properties; it
// never starts a unit or touches one a step does not name. It uses the
// pure-Go D-Bus client (github.com/coreos/go-systemd/v22/dbus).
package livefix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/amilint/amilint/internal/audit/fix"
	"github.com/amilint/amilint/internal/systemd/bus"
)

// Change is one thing done (or, in a dry run, to be done) to the host.
type Change struct {
	// Action is "disable", "mask", "reload", "stop" or "reset-failed".
	Action string
	// Unit is the unit acted on ("" for reload).
	Unit string
	// Detail says what changed: the symlink removed or created, the
	// state a unit was stopped from, the job result.
	Detail string
}

func (c Change) String() string {
	s := c.Action
	if c.Unit != "" {
		s += " " + c.Unit
	}
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	return s
}

// Result is what Apply did.
type Result struct {
	Changes []Change
	// Skipped are the units the host does not have, with why.
	Skipped []Change
}

// Client changes units of one manager.
type Client struct {
	conn *sd.Conn
}

// Dial connects to the manager at address (see bus.Address: "" is the
// system bus, a path is a bus socket or systemd's private socket).
func Dial(ctx context.Context, address string) (*Client, error) {
	c, err := bus.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return &Client{conn: c}, nil
}

// Close closes the connection.
func (c *Client) Close() { c.conn.Close() }

// state is what the manager says of a unit before any change.
type state struct {
	load, file, active, sub string
}

func (c *Client) state(ctx context.Context, name string) (state, error) {
	props, err := c.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return state{}, fmt.Errorf("unit %s: %w", name, err)
	}
	str := func(k string) string { v, _ := props[k].(string); return v }
	return state{load: str("LoadState"), file: str("UnitFileState"), active: str("ActiveState"), sub: str("SubState")}, nil
}

// stoppable are the active states a stop changes.
var stoppable = []string{"active", "activating", "reloading"}

// Apply carries out the steps (fix.Steps order: disable, then mask): the
// unit files first, one reload, then a stop of every named unit still
// running. With dryRun it changes nothing and returns what it would do.
func (c *Client) Apply(ctx context.Context, steps []fix.Step, dryRun bool) (*Result, error) {
	res := &Result{}
	var toStop []string
	states := map[string]state{}
	changedFiles := false
	for _, st := range steps {
		var units []string
		for _, u := range st.Units {
			s, err := c.state(ctx, u)
			if err != nil {
				return res, err
			}
			if s.load == "not-found" && s.file == "" {
				res.Skipped = append(res.Skipped, Change{Action: st.Action, Unit: u, Detail: "no such unit on this host"})
				continue
			}
			states[u] = s
			units = append(units, u)
			if slices.Contains(stoppable, s.active) && !slices.Contains(toStop, u) {
				toStop = append(toStop, u)
			}
		}
		if len(units) == 0 {
			continue
		}
		if dryRun {
			for _, u := range units {
				res.Changes = append(res.Changes, Change{Action: st.Action, Unit: u, Detail: "unit file " + orUnknown(states[u].file)})
			}
			continue
		}
		var changes []Change
		switch st.Action {
		case fix.Disable:
			cs, err := c.conn.DisableUnitFilesContext(ctx, units, false)
			if err != nil {
				return res, fmt.Errorf("disable %v: %w", units, err)
			}
			for _, ch := range cs {
				changes = append(changes, Change{Action: st.Action, Unit: unitOf(ch.Filename, units), Detail: describe(ch.Type, ch.Filename, ch.Destination)})
			}
		case fix.Mask:
			cs, err := c.conn.MaskUnitFilesContext(ctx, units, false, true)
			if err != nil {
				return res, fmt.Errorf("mask %v: %w", units, err)
			}
			for _, ch := range cs {
				changes = append(changes, Change{Action: st.Action, Unit: unitOf(ch.Filename, units), Detail: describe(ch.Type, ch.Filename, ch.Destination)})
			}
		default:
			return res, fmt.Errorf("step %q: want %s or %s", st.Action, fix.Disable, fix.Mask)
		}
		if len(changes) == 0 {
			for _, u := range units {
				changes = append(changes, Change{Action: st.Action, Unit: u, Detail: "nothing to change (unit file " + orUnknown(states[u].file) + ")"})
			}
		} else {
			changedFiles = true
		}
		res.Changes = append(res.Changes, changes...)
	}
	if changedFiles {
		if err := c.conn.ReloadContext(ctx); err != nil {
			return res, fmt.Errorf("reload: %w", err)
		}
		res.Changes = append(res.Changes, Change{Action: "reload", Detail: "the manager reloaded its unit files"})
	}
	var errs []error
	for _, u := range toStop {
		from := states[u].active + "/" + states[u].sub
		if dryRun {
			res.Changes = append(res.Changes, Change{Action: "stop", Unit: u, Detail: "now " + from})
			continue
		}
		done := make(chan string, 1)
		if _, err := c.conn.StopUnitContext(ctx, u, "replace", done); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", u, err))
			continue
		}
		select {
		case r := <-done:
			if r != "done" {
				errs = append(errs, fmt.Errorf("stop %s: job %s", u, r))
				continue
			}
			res.Changes = append(res.Changes, Change{Action: "stop", Unit: u, Detail: "stopped (was " + from + ")"})
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("stop %s: %w", u, ctx.Err()))
		}
	}
	// As an administrator would after "systemctl stop": reset-failed every
	// fixed unit the manager still holds as failed or with a restart count,
	// so the crash loop's record (failed state, NRestarts, start limit)
	// does not outlive the fix.
	for _, u := range slices.Sorted(maps.Keys(states)) {
		was := states[u]
		if !slices.Contains(toStop, u) && was.active != "failed" {
			continue
		}
		if dryRun {
			if was.active == "failed" {
				res.Changes = append(res.Changes, Change{Action: "reset-failed", Unit: u, Detail: "now " + was.active + "/" + was.sub})
			}
			continue
		}
		now, err := c.state(ctx, u)
		if err != nil || now.load != "loaded" {
			continue // already unloaded by the manager: nothing left to reset
		}
		if err := c.conn.ResetFailedUnitContext(ctx, u); err != nil {
			if !isNoSuchUnit(err) {
				errs = append(errs, fmt.Errorf("reset-failed %s: %w", u, err))
			}
			continue
		}
		res.Changes = append(res.Changes, Change{Action: "reset-failed", Unit: u, Detail: "cleared its failed state and restart count (was " + now.active + "/" + now.sub + ")"})
	}
	return res, errors.Join(errs...)
}

// isNoSuchUnit reports whether err is the manager saying the unit is not
// loaded (it was garbage-collected between two calls).
func isNoSuchUnit(err error) bool {
	var de dbus.Error
	return errors.As(err, &de) && (de.Name == "org.freedesktop.systemd1.NoSuchUnit" || de.Name == "org.freedesktop.systemd1.LoadFailed")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func describe(typ, file, dest string) string {
	switch typ {
	case "unlink":
		return "removed " + file
	case "symlink":
		return "created " + file + " → " + dest
	}
	return typ + " " + file
}

// unitOf names the unit a changed file belongs to: the step's unit whose
// name ends the file's path, else "".
func unitOf(file string, units []string) string {
	for _, u := range units {
		if strings.HasSuffix(file, u) {
			return u
		}
	}
	return ""
}
