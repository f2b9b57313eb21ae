package policy

import (
	"errors"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The findings of an evaluation come out of OPA's result value. What
// decides them is decodeFindings: OPA's conversion of the value to Go
// (ast.JSON), then encoding/json's encoding of each item and its decoding
// into a finding.Finding, with all of encoding/json's rules (members
// matched to fields ignoring case, unknown members skipped, numbers as
// float64, invalid UTF-8 repaired). That path costs three conversions of
// every finding; directFindings builds the same findings from OPA's value
// in one, for the shape a well-formed finding has, and declines anything
// else (a member that matches a field only ignoring case, a value of
// another type, a number float64 cannot hold, invalid UTF-8, a finding
// without rule_id or message, …), which then goes the whole way, so every
// error, and every odd finding a user's policy may return, is judged by
// encoding/json as before.

// maxDirectDepth bounds the nesting directFindings follows (encoding/json
// refuses nesting deeper than 10,000).
const maxDirectDepth = 200

// The JSON names of the fields of the structs a finding decodes into;
// TestFindingFieldNames holds them to the structs' tags.
var (
	findingFields     = []string{"rule_id", "title", "severity", "unit", "message", "chain", "remediation", "waived", "waiver", "references", "evidence"}
	edgeFields        = []string{"from", "to", "kind", "source", "assumes"}
	remediationFields = []string{"action", "units", "commands", "text"}
	waiverFields      = []string{"reason", "expires"}
)

// objectType is the concrete type of OPA's ordinary objects (not its lazy
// ones, which rego converts to their native Go map as is); worked out on
// first use, not at every program start.
var objectType = sync.OnceValue(func() reflect.Type { return reflect.TypeOf(ast.NewObject()) })

// errDeclined stops an iteration directFindings cannot finish.
var errDeclined = errors.New("not a plain finding")

// directFindings returns the findings of v, a set or array of finding
// objects, as decodeFindings would before sorting them, or false where
// decodeFindings must judge v.
func directFindings(v ast.Value) ([]finding.Finding, bool) {
	items, ok := elems(v)
	if !ok {
		return nil, false
	}
	out := make([]finding.Finding, 0, len(items))
	for _, it := range items {
		f, ok := directFinding(it.Value)
		if !ok {
			return nil, false
		}
		out = append(out, f)
	}
	return out, true
}

// elems returns the members of an array or set in the order OPA's
// conversion to Go lists them.
func elems(v ast.Value) ([]*ast.Term, bool) {
	switch x := v.(type) {
	case *ast.Array:
		out := make([]*ast.Term, x.Len())
		for i := range out {
			out[i] = x.Elem(i)
		}
		return out, true
	case ast.Set:
		out := make([]*ast.Term, 0, x.Len())
		x.Foreach(func(t *ast.Term) { out = append(out, t) })
		return out, true
	}
	return nil, false
}

// members calls f with each member of v, an ordinary object with string
// keys, whose known keys are names; a key that is none of them but may
// match one ignoring case declines, and a member with any other key must
// be plain JSON (encoding/json skips it).
func members(v ast.Value, names []string, depth int, f func(key string, val ast.Value) bool) bool {
	if reflect.TypeOf(v) != objectType() || depth > maxDirectDepth {
		return false
	}
	err := v.(ast.Object).Iter(func(k, val *ast.Term) error {
		key, ok := k.Value.(ast.String)
		if !ok {
			return errDeclined
		}
		known := false
		for _, n := range names {
			if string(key) == n {
				known = true
				break
			}
		}
		switch {
		case known:
			ok = f(string(key), val.Value)
		case mayFold(string(key), names):
			ok = false
		default:
			_, ok = plain(val.Value, depth+1, false)
		}
		if !ok {
			return errDeclined
		}
		return nil
	})
	return err == nil
}

// mayFold reports whether encoding/json might match key, which is none of
// names, to one of them: it matches ignoring case, or it is not all ASCII
// (Unicode folds some letters to ASCII ones, K to k).
func mayFold(key string, names []string) bool {
	for i := range len(key) {
		if key[i] >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if len(n) != len(key) {
			continue
		}
		same := true
		for i := range len(n) {
			a, b := n[i], key[i]
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	return false
}

// directFinding is the finding of one item, as decodeFindings makes it.
func directFinding(v ast.Value) (finding.Finding, bool) {
	var f finding.Finding
	ok := members(v, findingFields, 1, func(key string, val ast.Value) bool {
		var ok bool
		switch key {
		case "rule_id":
			f.RuleID, ok = str(val)
		case "title":
			f.Title, ok = str(val)
		case "severity":
			var s string
			if s, ok = str(val); ok {
				var err error
				f.Severity, err = finding.ParseSeverity(s)
				ok = err == nil
			}
		case "unit":
			f.Unit, ok = str(val)
		case "message":
			f.Message, ok = str(val)
		case "chain":
			f.Chain, ok = edges(val)
		case "remediation":
			f.Remediation, ok = remediation(val)
		case "waived":
			var b ast.Boolean
			b, ok = val.(ast.Boolean)
			f.Waived = bool(b)
		case "waiver":
			f.Waiver, ok = waiver(val)
		case "references":
			f.References, ok = strs(val)
		case "evidence":
			var m any
			if m, ok = plain(val, 2, true); ok {
				f.Evidence, ok = m.(map[string]any)
			}
		}
		return ok
	})
	if !ok || !complete(&f) {
		return finding.Finding{}, false
	}
	return f, true
}

// complete reports whether f has what every finding must (a rule id and a
// message) and fills in what a policy may leave out: no chain is an empty
// one, no remediation action is "none". Both ways out of a result use it.
func complete(f *finding.Finding) bool {
	if f.RuleID == "" || f.Message == "" {
		return false
	}
	if f.Chain == nil {
		f.Chain = []unit.Edge{}
	}
	if f.Remediation.Action == "" {
		f.Remediation.Action = "none"
	}
	return true
}

// str is a string that encoding/json decodes as it is.
func str(v ast.Value) (string, bool) {
	s, ok := v.(ast.String)
	return string(s), ok && utf8.ValidString(string(s))
}

func strs(v ast.Value) ([]string, bool) {
	items, ok := elems(v)
	if !ok {
		return nil, false
	}
	out := make([]string, len(items))
	for i, t := range items {
		if out[i], ok = str(t.Value); !ok {
			return nil, false
		}
	}
	return out, true
}

func edges(v ast.Value) ([]unit.Edge, bool) {
	items, ok := elems(v)
	if !ok {
		return nil, false
	}
	out := make([]unit.Edge, len(items))
	for i, t := range items {
		e := &out[i]
		if !members(t.Value, edgeFields, 3, func(key string, val ast.Value) bool {
			var ok bool
			switch key {
			case "from":
				e.From, ok = str(val)
			case "to":
				e.To, ok = str(val)
			case "kind":
				e.Kind, ok = str(val)
			case "source":
				e.Source, ok = str(val)
			case "assumes":
				e.Assumes, ok = str(val)
			}
			return ok
		}) {
			return nil, false
		}
	}
	return out, true
}

func remediation(v ast.Value) (finding.Remediation, bool) {
	var r finding.Remediation
	ok := members(v, remediationFields, 2, func(key string, val ast.Value) bool {
		var ok bool
		switch key {
		case "action":
			r.Action, ok = str(val)
		case "units":
			r.Units, ok = strs(val)
		case "commands":
			r.Commands, ok = strs(val)
		case "text":
			r.Text, ok = str(val)
		}
		return ok
	})
	return r, ok
}

func waiver(v ast.Value) (*finding.Waiver, bool) {
	w := &finding.Waiver{}
	ok := members(v, waiverFields, 2, func(key string, val ast.Value) bool {
		var ok bool
		switch key {
		case "reason":
			w.Reason, ok = str(val)
		case "expires":
			w.Expires, ok = str(val)
		}
		return ok
	})
	return w, ok
}

// plain reports whether v is JSON that encoding/json encodes and decodes
// into an any as it is, and, with build, returns that any: nil, bool,
// float64, string, []any, map[string]any.
func plain(v ast.Value, depth int, build bool) (any, bool) {
	if depth > maxDirectDepth {
		return nil, false
	}
	switch x := v.(type) {
	case ast.Null:
		return nil, true
	case ast.Boolean:
		return bool(x), true
	case ast.String: // encoding/json repairs invalid UTF-8 in what it skips too
		return string(x), !build || utf8.ValidString(string(x))
	case ast.Number:
		if !validNumber(string(x)) {
			return nil, false
		}
		if !build {
			return nil, true // encoding/json skips it unconverted
		}
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	case *ast.Array, ast.Set:
		items, _ := elems(v)
		var out []any
		if build {
			out = make([]any, len(items))
		}
		for i, t := range items {
			y, ok := plain(t.Value, depth+1, build)
			if !ok {
				return nil, false
			}
			if build {
				out[i] = y
			}
		}
		return out, true
	}
	if reflect.TypeOf(v) != objectType() {
		return nil, false
	}
	obj := v.(ast.Object)
	var out map[string]any
	if build {
		out = make(map[string]any, obj.Len())
	}
	err := obj.Iter(func(k, val *ast.Term) error {
		key, ok := k.Value.(ast.String)
		if !ok || build && !utf8.ValidString(string(key)) {
			return errDeclined
		}
		y, ok := plain(val.Value, depth+1, build)
		if !ok {
			return errDeclined
		}
		if build {
			out[string(key)] = y
		}
		return nil
	})
	return out, err == nil
}

// validNumber reports whether s is a number as JSON writes it (RFC 8259),
// which encoding/json requires of a json.Number it encodes.
func validNumber(s string) bool {
	i := 0
	digits := func() bool {
		start := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(s)
}
