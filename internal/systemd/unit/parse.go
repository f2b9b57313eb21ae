package unit

import (
	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// Option is one "Key=Value" assignment of a unit file section: go-systemd's
// type, so options serialize with its unit.Serialize. ParseConfig reads
// them as systemd 252 does (go-systemd's own deserializer refuses files
// systemd loads).
type Option = sdunit.UnitOption

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
