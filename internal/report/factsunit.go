package report

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The members of a unit, written by hand as WriteJSON writes them two
// levels deep: encoding/json's reflection and the second pass to indent
// were the larger half of the writing once the security checks were
// written by hand. Member by member in each struct's order, with its
// omitempty; TestFactsWritersKnowTheirTypes fails when one of these
// types changes, and the equality tests and FuzzWriteUnit hold the bytes
// to WriteJSON's.

// indents is a newline and the indentation of any depth written here.
const indents = "\n                                                                "

// nl appends a newline and the indentation of depth.
func nl(b []byte, depth int) []byte { return append(b, indents[:1+2*depth]...) }

// key appends the separator before a member (none before the first), the
// newline, and the member's name, which needs no escaping.
func key(b []byte, first bool, depth int, name string) []byte {
	if !first {
		b = append(b, ',')
	}
	return append(append(append(nl(b, depth), '"'), name...), `": `...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// appendStrings appends ss, an array at depth.
func appendStrings(b []byte, ss []string, depth int) []byte {
	switch {
	case ss == nil:
		return append(b, "null"...)
	case len(ss) == 0:
		return append(b, "[]"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(nl(b, depth+1), s)
	}
	return append(nl(b, depth), ']')
}

// secondsType names Seconds in the error encoding/json gives when its
// MarshalJSON fails.
var secondsType = reflect.TypeFor[facts.Seconds]()

// appendSeconds appends s's MarshalJSON, as encoding/json does.
func appendSeconds(b []byte, s facts.Seconds) ([]byte, error) {
	m, err := s.MarshalJSON()
	if err != nil {
		return nil, &json.MarshalerError{Type: secondsType, Err: err}
	}
	return append(b, m...), nil
}

// appendUnitMembers appends a non-nil unit's opening brace and members
// but its security, at depth 3, without the closing brace.
func appendUnitMembers(b []byte, u *facts.Unit) ([]byte, error) {
	const d = 3
	b = appendString(key(append(b, '{'), true, d, "name"), u.Name)
	b = appendString(key(b, false, d, "unit_type"), u.Type)
	b = appendString(key(b, false, d, "state"), u.State)
	if u.Path != "" {
		b = appendString(key(b, false, d, "path"), u.Path)
	}
	if u.Fragment != "" {
		b = appendString(key(b, false, d, "fragment"), u.Fragment)
	}
	b = appendStrings(key(b, false, d, "drop_ins"), u.DropIns, d)
	b = appendStrings(key(b, false, d, "aliases"), u.Aliases, d)
	b = appendBool(key(b, false, d, "starts_at_boot"), u.StartsAtBoot)
	b = appendStrings(key(b, false, d, "activated_by"), u.ActivatedBy, d)
	b = appendBool(key(b, false, d, "active_at_boot"), u.ActiveAtBoot)
	b = appendEdges(key(b, false, d, "chain"), u.Chain, d)
	if u.Preset != "" {
		b = appendString(key(b, false, d, "preset"), u.Preset)
	}
	b = appendChecks(key(b, false, d, "conditions"), u.Conditions, d)
	b = appendString(key(b, false, d, "conditions_met"), string(u.ConditionsMet))
	if u.ConditionsReason != "" {
		b = appendString(key(b, false, d, "conditions_reason"), u.ConditionsReason)
	}
	b = appendString(key(b, false, d, "would_run"), string(u.WouldRun))
	if u.ServiceType != "" {
		b = appendString(key(b, false, d, "type"), u.ServiceType)
	}
	b = appendExec(key(b, false, d, "exec_start"), u.ExecStart, d)
	b = key(b, false, d, "exec_start_pre")
	switch {
	case u.ExecStartPre == nil:
		b = append(b, "null"...)
	case len(u.ExecStartPre) == 0:
		b = append(b, "[]"...)
	default:
		b = append(b, '[')
		for i, e := range u.ExecStartPre {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendExec(nl(b, d+1), e, d+1)
		}
		b = append(nl(b, d), ']')
	}
	b = appendString(key(b, false, d, "restart"), u.Restart)
	var err error
	if b, err = appendSeconds(key(b, false, d, "restart_sec"), u.RestartSec); err != nil {
		return nil, err
	}
	if b, err = appendSeconds(key(b, false, d, "start_limit_interval_sec"), u.StartLimitIntervalSec); err != nil {
		return nil, err
	}
	b = strconv.AppendInt(key(b, false, d, "start_limit_burst"), int64(u.StartLimitBurst), 10)
	b = appendStrings(key(b, false, d, "restart_prevent_exit_status"), u.RestartPreventExitStatus, d)
	if u.User != "" {
		b = appendString(key(b, false, d, "user"), u.User)
	}
	if u.Group != "" {
		b = appendString(key(b, false, d, "group"), u.Group)
	}
	b = appendBool(key(b, false, d, "dynamic_user"), u.DynamicUser)
	b = key(b, false, d, "environment_files")
	switch {
	case u.EnvironmentFiles == nil:
		b = append(b, "null"...)
	case len(u.EnvironmentFiles) == 0:
		b = append(b, "[]"...)
	default:
		b = append(b, '[')
		for i, f := range u.EnvironmentFiles {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(nl(b, d+1), '{')
			b = appendString(key(b, true, d+2, "path"), f.Path)
			b = appendBool(key(b, false, d+2, "optional"), f.Optional)
			b = appendBool(key(b, false, d+2, "exists"), f.Exists)
			b = append(nl(b, d+1), '}')
		}
		b = append(nl(b, d), ']')
	}
	b = key(b, false, d, "sandboxing")
	switch {
	case u.Sandboxing == nil:
		b = append(b, "null"...)
	case len(u.Sandboxing) == 0:
		b = append(b, "{}"...)
	default:
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(u.Sandboxing)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(append(appendString(nl(b, d+1), k), ':', ' '), u.Sandboxing[k])
		}
		b = append(nl(b, d), '}')
	}
	b = appendStrings(key(b, false, d, "wants"), u.Wants, d)
	b = appendStrings(key(b, false, d, "requires"), u.Requires, d)
	b = appendStrings(key(b, false, d, "after"), u.After, d)
	b = appendStrings(key(b, false, d, "wanted_by"), u.WantedBy, d)
	b = appendBool(key(b, false, d, "spawns_container"), u.SpawnsContainer)
	b = appendDirectives(key(b, false, d, "directives"), u.Directives, d)
	if len(u.Problems) > 0 {
		b = appendStrings(key(b, false, d, "problems"), u.Problems, d)
	}
	return b, nil
}

// appendEdges appends a chain, an array at depth.
func appendEdges(b []byte, es []unit.Edge, depth int) []byte {
	switch {
	case es == nil:
		return append(b, "null"...)
	case len(es) == 0:
		return append(b, "[]"...)
	}
	b = append(b, '[')
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(nl(b, depth+1), '{')
		b = appendString(key(b, true, depth+2, "from"), e.From)
		b = appendString(key(b, false, depth+2, "to"), e.To)
		b = appendString(key(b, false, depth+2, "kind"), e.Kind)
		if e.Source != "" {
			b = appendString(key(b, false, depth+2, "source"), e.Source)
		}
		b = append(nl(b, depth+1), '}')
	}
	return append(nl(b, depth), ']')
}

// appendChecks appends a unit's conditions, an array at depth.
func appendChecks(b []byte, cs []condition.Check, depth int) []byte {
	switch {
	case cs == nil:
		return append(b, "null"...)
	case len(cs) == 0:
		return append(b, "[]"...)
	}
	b = append(b, '[')
	for i, c := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(nl(b, depth+1), '{')
		b = appendString(key(b, true, depth+2, "setting"), c.Setting)
		b = appendString(key(b, false, depth+2, "value"), c.Value)
		b = appendBool(key(b, false, depth+2, "trigger"), c.Trigger)
		b = appendBool(key(b, false, depth+2, "negate"), c.Negate)
		b = appendString(key(b, false, depth+2, "verdict"), string(c.Verdict))
		b = appendString(key(b, false, depth+2, "reason"), c.Reason)
		b = append(nl(b, depth+1), '}')
	}
	return append(nl(b, depth), ']')
}

// appendExec appends a command, an object at depth (null when nil).
func appendExec(b []byte, e *facts.Exec, depth int) []byte {
	if e == nil {
		return append(b, "null"...)
	}
	d := depth + 1
	b = appendString(key(append(b, '{'), true, d, "path"), e.Path)
	if e.Resolved != "" {
		b = appendString(key(b, false, d, "resolved"), e.Resolved)
	}
	b = key(b, false, d, "exists")
	if e.Exists == nil {
		b = append(b, "null"...)
	} else {
		b = appendBool(b, *e.Exists)
	}
	b = appendStrings(key(b, false, d, "args"), e.Args, d)
	b = appendString(key(b, false, d, "prefixes"), e.Prefixes)
	b = appendString(key(b, false, d, "raw"), e.Raw)
	if e.Error != "" {
		b = appendString(key(b, false, d, "error"), e.Error)
	}
	return append(nl(b, depth), '}')
}

// appendDirectives appends section → key → values, an object at depth,
// each map in the order of its keys as encoding/json sorts them.
func appendDirectives(b []byte, ds map[string]map[string][]string, depth int) []byte {
	switch {
	case ds == nil:
		return append(b, "null"...)
	case len(ds) == 0:
		return append(b, "{}"...)
	}
	b = append(b, '{')
	for i, section := range slices.Sorted(maps.Keys(ds)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(nl(b, depth+1), section), ':', ' ')
		keys := ds[section]
		switch {
		case keys == nil:
			b = append(b, "null"...)
			continue
		case len(keys) == 0:
			b = append(b, "{}"...)
			continue
		}
		b = append(b, '{')
		for j, k := range slices.Sorted(maps.Keys(keys)) {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendStrings(append(appendString(nl(b, depth+2), k), ':', ' '), keys[k], depth+2)
		}
		b = append(nl(b, depth+1), '}')
	}
	return append(nl(b, depth), '}')
}
