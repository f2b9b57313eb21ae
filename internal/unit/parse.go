package unit

import (
	"fmt"
	"io"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// Option is one "Key=Value" assignment of a unit file section.
type Option = sdunit.UnitOption

// Parse reads a unit file or drop-in. It uses go-systemd's parser, which
// follows systemd's syntax (sections, continuation lines, comments).
func Parse(r io.Reader) ([]*Option, error) {
	opts, err := sdunit.DeserializeOptions(r)
	if err != nil {
		return nil, fmt.Errorf("parse unit file: %w", err)
	}
	return opts, nil
}

// Values returns every value of section.name in order, applying systemd's
// list semantics: an empty assignment resets the list.
func Values(opts []*Option, section, name string) []string {
	var out []string
	for _, o := range opts {
		if o.Section != section || o.Name != name {
			continue
		}
		if o.Value == "" {
			out = out[:0]
			continue
		}
		out = append(out, o.Value)
	}
	return out
}

// Last returns the last value of section.name, as systemd applies a
// single-valued setting, and whether it was set.
func Last(opts []*Option, section, name string) (string, bool) {
	v, ok := "", false
	for _, o := range opts {
		if o.Section == section && o.Name == name {
			v, ok = o.Value, true
		}
	}
	return v, ok
}
