package report

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// A unit, written by hand as WriteJSON writes it two levels deep:
// encoding/json's reflection and a second pass to indent were most of the
// writing. Member by member in each struct's order, with its omitempty;
// TestFactsWritersKnowTheirTypes fails when one of these types changes,
// and the equality tests and FuzzWriteUnit hold the bytes to WriteJSON's.
// Nothing here fails: the only members that can (the spans) are checked
// by checkUnits before anything is written.

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

// appendOptBool appends a *bool: null, true or false.
func appendOptBool(b []byte, v *bool) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return appendBool(b, *v)
}

// appendTenths appends a *Tenths: null or its number.
func appendTenths(b []byte, t *security.Tenths) []byte {
	if t == nil {
		return append(b, "null"...)
	}
	return t.AppendJSON(b)
}

// appendArray appends xs, an array at depth: null, [] or each element on
// its own line, written by elem at depth+1.
func appendArray[T any](b []byte, xs []T, depth int, elem func([]byte, T, int) []byte) []byte {
	switch {
	case xs == nil:
		return append(b, "null"...)
	case len(xs) == 0:
		return append(b, "[]"...)
	}
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(nl(b, depth+1), x, depth+1)
	}
	return append(nl(b, depth), ']')
}

// appendMap appends m, an object at depth with its keys in the order
// encoding/json sorts them, each value written by val at depth+1.
func appendMap[V any](b []byte, m map[string]V, depth int, val func([]byte, V, int) []byte) []byte {
	switch {
	case m == nil:
		return append(b, "null"...)
	case len(m) == 0:
		return append(b, "{}"...)
	}
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = val(append(appendString(nl(b, depth+1), k), ':', ' '), m[k], depth+1)
	}
	return append(nl(b, depth), '}')
}

// appendStrings appends ss, an array at depth.
func appendStrings(b []byte, ss []string, depth int) []byte {
	return appendArray(b, ss, depth, appendStringAt)
}

func appendStringAt(b []byte, s string, _ int) []byte { return appendString(b, s) }

// appendSeconds appends s's MarshalJSON, as encoding/json does, failing
// as it does (its error names the type).
func appendSeconds(b []byte, s facts.Seconds) ([]byte, error) {
	m, err := s.MarshalJSON()
	if err != nil {
		return nil, &json.MarshalerError{Type: reflect.TypeFor[facts.Seconds](), Err: err}
	}
	return append(b, m...), nil
}

// appendSpan appends a span checkUnits found to marshal.
func appendSpan(b []byte, s facts.Seconds) []byte {
	m, _ := s.MarshalJSON()
	return append(b, m...)
}

// appendUnit appends u as WriteJSON writes it two levels deep: its
// members, then its security, which is a Unit's last member
// (TestFactsWritersKnowTheirTypes).
func appendUnit(b []byte, u *facts.Unit, sc *scratch) []byte {
	if u == nil {
		return append(b, "null"...)
	}
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
	b = appendArray(key(b, false, d, "chain"), u.Chain, d, appendEdge)
	if u.Preset != "" {
		b = appendString(key(b, false, d, "preset"), u.Preset)
	}
	b = appendArray(key(b, false, d, "conditions"), u.Conditions, d, appendCondition)
	b = appendString(key(b, false, d, "conditions_met"), string(u.ConditionsMet))
	if u.ConditionsReason != "" {
		b = appendString(key(b, false, d, "conditions_reason"), u.ConditionsReason)
	}
	if len(u.ConditionsUndecided) > 0 {
		b = appendStrings(key(b, false, d, "conditions_undecided"), u.ConditionsUndecided, d)
	}
	b = appendString(key(b, false, d, "would_run"), string(u.WouldRun))
	if u.ServiceType != "" {
		b = appendString(key(b, false, d, "type"), u.ServiceType)
	}
	b = appendExec(key(b, false, d, "exec_start"), u.ExecStart, d)
	b = appendArray(key(b, false, d, "exec_start_pre"), u.ExecStartPre, d, appendExec)
	b = appendString(key(b, false, d, "restart"), u.Restart)
	b = appendSpan(key(b, false, d, "restart_sec"), u.RestartSec)
	b = appendSpan(key(b, false, d, "start_limit_interval_sec"), u.StartLimitIntervalSec)
	b = strconv.AppendInt(key(b, false, d, "start_limit_burst"), int64(u.StartLimitBurst), 10)
	b = appendStrings(key(b, false, d, "restart_prevent_exit_status"), u.RestartPreventExitStatus, d)
	if u.User != "" {
		b = appendString(key(b, false, d, "user"), u.User)
	}
	if u.Group != "" {
		b = appendString(key(b, false, d, "group"), u.Group)
	}
	b = appendBool(key(b, false, d, "dynamic_user"), u.DynamicUser)
	b = appendArray(key(b, false, d, "environment_files"), u.EnvironmentFiles, d, appendEnvironmentFile)
	b = appendMap(key(b, false, d, "sandboxing"), u.Sandboxing, d, appendStringAt)
	b = appendStrings(key(b, false, d, "wants"), u.Wants, d)
	b = appendStrings(key(b, false, d, "requires"), u.Requires, d)
	b = appendStrings(key(b, false, d, "after"), u.After, d)
	b = appendStrings(key(b, false, d, "wanted_by"), u.WantedBy, d)
	b = appendBool(key(b, false, d, "spawns_container"), u.SpawnsContainer)
	b = appendMap(key(b, false, d, "directives"), u.Directives, d, func(b []byte, keys map[string][]string, depth int) []byte {
		return appendMap(b, keys, depth, appendStrings)
	})
	if len(u.Problems) > 0 {
		b = appendStrings(key(b, false, d, "problems"), u.Problems, d)
	}
	if u.Security != nil {
		b = appendSecurity(key(b, false, d, "security"), u.Security, d, &sc.ids)
	}
	return append(nl(b, d-1), '}')
}

// appendEdge appends an edge of a chain, an object at depth.
func appendEdge(b []byte, e unit.Edge, depth int) []byte {
	d := depth + 1
	b = appendString(key(append(b, '{'), true, d, "from"), e.From)
	b = appendString(key(b, false, d, "to"), e.To)
	b = appendString(key(b, false, d, "kind"), e.Kind)
	if e.Source != "" {
		b = appendString(key(b, false, d, "source"), e.Source)
	}
	if e.Assumes != "" {
		b = appendString(key(b, false, d, "assumes"), e.Assumes)
	}
	return append(nl(b, depth), '}')
}

// appendCondition appends a unit's condition, an object at depth.
func appendCondition(b []byte, c condition.Check, depth int) []byte {
	d := depth + 1
	b = appendString(key(append(b, '{'), true, d, "setting"), c.Setting)
	b = appendString(key(b, false, d, "value"), c.Value)
	b = appendBool(key(b, false, d, "trigger"), c.Trigger)
	b = appendBool(key(b, false, d, "negate"), c.Negate)
	b = appendString(key(b, false, d, "verdict"), string(c.Verdict))
	b = appendString(key(b, false, d, "reason"), c.Reason)
	return append(nl(b, depth), '}')
}

// appendEnvironmentFile appends an EnvironmentFile= reference, an object
// at depth.
func appendEnvironmentFile(b []byte, f facts.EnvironmentFile, depth int) []byte {
	d := depth + 1
	b = appendString(key(append(b, '{'), true, d, "path"), f.Path)
	b = appendBool(key(b, false, d, "optional"), f.Optional)
	b = appendBool(key(b, false, d, "exists"), f.Exists)
	return append(nl(b, depth), '}')
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
	b = appendOptBool(key(b, false, d, "exists"), e.Exists)
	b = appendStrings(key(b, false, d, "args"), e.Args, d)
	b = appendString(key(b, false, d, "prefixes"), e.Prefixes)
	b = appendString(key(b, false, d, "raw"), e.Raw)
	if e.Error != "" {
		b = appendString(key(b, false, d, "error"), e.Error)
	}
	return append(nl(b, depth), '}')
}

// appendSecurity appends s, non-nil, a service's security, an object at
// depth. Its 81 checks, each with a sentence, are three quarters of a
// facts document: they are written without reflection, and their ids,
// the same for every service of an image, are sorted once (ids holds the
// previous service's, sorted).
func appendSecurity(b []byte, s *facts.Security, depth int, ids *[]string) []byte {
	d := depth + 1
	b = appendTenths(key(append(b, '{'), true, d, "exposure"), s.Exposure)
	if s.Level != "" {
		b = appendString(key(b, false, d, "level"), s.Level)
	}
	b = key(b, false, d, "checks")
	switch {
	case s.Checks == nil:
		b = append(b, "null"...)
	case len(s.Checks) == 0:
		b = append(b, "{}"...)
	default:
		b = append(b, '{')
		*ids = sortedAgain(*ids, s.Checks)
		for i, id := range *ids {
			if i > 0 {
				b = append(b, ',')
			}
			c := s.Checks[id]
			b = append(appendString(nl(b, d+1), id), ": {"...)
			b = appendString(key(b, true, d+2, "name"), c.Name)
			b = appendOptBool(key(b, false, d+2, "set"), c.Set)
			b = appendTenths(key(b, false, d+2, "exposure"), c.Exposure)
			b = appendString(key(b, false, d+2, "description"), c.Description)
			b = append(nl(b, d+1), '}')
		}
		b = append(nl(b, d), '}')
	}
	b = appendArray(key(b, false, d, "top"), s.Top, d, appendFix)
	if len(s.Notes) > 0 {
		b = appendStrings(key(b, false, d, "notes"), s.Notes, d)
	}
	if s.Error != "" {
		b = appendString(key(b, false, d, "error"), s.Error)
	}
	return append(nl(b, depth), '}')
}

// appendFix appends one of a security's top fixes, an object at depth.
func appendFix(b []byte, f facts.SecurityFix, depth int) []byte {
	d := depth + 1
	b = appendString(key(append(b, '{'), true, d, "id"), f.ID)
	b = appendString(key(b, false, d, "name"), f.Name)
	b = f.Exposure.AppendJSON(key(b, false, d, "exposure"))
	return append(nl(b, depth), '}')
}
