package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// factsOf is the facts document `amilint facts` prints for src.
func factsOf(t *testing.T, aud *audit.Auditor, src rootfs.Source) *facts.Document {
	t.Helper()
	fsys := rootfs.New(src).Memo()
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(t, err)
	doc, err := aud.Facts(fsys, inv)
	require.NoError(t, err)
	return doc
}

// assertWritesAsWriteJSON checks WriteFacts against WriteJSON, which
// TestWriteJSONEqualsEncoder holds to encoding/json's Encoder.
func assertWritesAsWriteJSON(t *testing.T, doc *facts.Document) {
	t.Helper()
	var want, got bytes.Buffer
	require.NoError(t, WriteJSON(&want, doc, true))
	require.NoError(t, WriteFacts(&got, doc))
	if !bytes.Equal(want.Bytes(), got.Bytes()) {
		w, g := want.String(), got.String()
		i := 0
		for i < min(len(w), len(g)) && w[i] == g[i] {
			i++
		}
		t.Fatalf("WriteFacts differs from WriteJSON at byte %d of %d/%d:\nwant …%s…\ngot  …%s…", i, len(w), len(g), w[max(0, i-80):min(len(w), i+80)], g[max(0, i-80):min(len(g), i+80)])
	}
}

func TestWriteFactsEqualsWriteJSON(t *testing.T) {
	aud, err := audit.New(audit.Config{FactsOnly: true})
	require.NoError(t, err)
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			src, err := fixtures.Source(name)
			require.NoError(t, err)
			assertWritesAsWriteJSON(t, factsOf(t, aud, src))
		})
	}
	t.Run("debian-root", func(t *testing.T) {
		src, err := rootfs.OpenDir(testenv.Bookworm.Path(t))
		require.NoError(t, err)
		defer src.Close()
		doc := factsOf(t, aud, src)
		require.Greater(t, len(doc.Units), 100, "a Debian root has hundreds of units: many pieces")
		assertWritesAsWriteJSON(t, doc)
	})
}

// TestWriteFactsEdges covers what real images rarely have: no units, a nil
// map, names encoding/json escapes, a nil unit, and every count of units
// around a piece's size.
func TestWriteFactsEdges(t *testing.T) {
	docs := []*facts.Document{
		{},
		{Schema: "amilint.facts/v1", Units: map[string]*facts.Unit{}, ConfigFiles: map[string]*facts.ConfigFile{}},
		{Units: map[string]*facts.Unit{"a.service": nil}},
		{Units: map[string]*facts.Unit{
			"<html>&\u2028.service": {Name: "<html>&\u2028.service", Chain: nil, Aliases: []string{}},
			"bad-\xff-utf8.service": {Name: "bad-\xff-utf8.service", Fragment: "/lib/systemd/system/\"quoted\\\".service"},
			"ü.service":             {Name: "ü.service", DropIns: []string{"}{][,:"}},
		}},
		{Image: facts.Image{OSRelease: map[string]string{"ID": "debian", "X": "a\"b"}}, Systemd: version.Info{Major: 252}},
		{Units: map[string]*facts.Unit{
			"no-checks.service":    {Name: "no-checks.service", Security: &facts.Security{}},
			"empty-checks.service": {Name: "empty-checks.service", Security: &facts.Security{Checks: map[string]facts.SecurityCheck{}, Top: []facts.SecurityFix{}, Error: "not <found> & \"gone\""}},
			"checks.service":       {Name: "checks.service", Security: securityEdges()},
			"other.service":        {Name: "other.service", Security: &facts.Security{Checks: map[string]facts.SecurityCheck{"Z": {}, "A": {Name: "A="}}}},
			"again.service":        {Name: "again.service", Security: securityEdges()},
		}},
	}
	for _, n := range []int{1, 7, 8, 9, 16, 17, 64} {
		units := map[string]*facts.Unit{}
		for i := range n {
			name := fmt.Sprintf("u%03d.service", i)
			units[name] = &facts.Unit{Name: name, State: "enabled", DropIns: []string{}, ExecStart: &facts.Exec{Path: "/bin/" + name}}
		}
		docs = append(docs, &facts.Document{Units: units})
	}
	for i, doc := range docs {
		t.Run(fmt.Sprint(i), func(t *testing.T) { assertWritesAsWriteJSON(t, doc) })
	}
}

// securityEdges is a service's security with every kind of check value:
// passed, failed, not applicable, names and sentences to escape.
func securityEdges() *facts.Security {
	yes, no := true, false
	exp, zero := security.Tenths(96), security.Tenths(0)
	return &facts.Security{
		Exposure: &exp, Level: "UNSAFE",
		Checks: map[string]facts.SecurityCheck{
			"PrivateTmp":    {Name: "PrivateTmp=", Set: &no, Exposure: &exp, Description: "Service has access to other software's temporary files"},
			"UserOrDynamic": {Name: "User=/DynamicUser=", Set: &yes, Exposure: &zero, Description: "Service runs as <root> & \"friends\" \u2028 ü \x01"},
			"bad\xffutf8":   {Name: "\xff", Description: "\t\n"},
			"":              {},
			"lt":            {Name: "a<b"},
			"gt":            {Name: "a>b"},
			"amp":           {Name: "a&b"},
			"quote":         {Name: "a\"b"},
			"backslash":     {Name: "a\\b"},
			"control":       {Name: "a\x7fb\x1f"},
		},
		Top:   []facts.SecurityFix{{ID: "PrivateTmp", Name: "PrivateTmp=", Exposure: exp}},
		Notes: []string{"a <note>"},
	}
}

// TestWriteFactsFails writes nothing when a value cannot be marshalled,
// as WriteJSON does.
func TestWriteFactsFails(t *testing.T) {
	units := map[string]*facts.Unit{}
	for i := range 20 {
		units[fmt.Sprint(i)] = &facts.Unit{Name: fmt.Sprint(i)}
	}
	units["7"].RestartSec = facts.Seconds(math.NaN()) // a span no JSON number holds
	units["9"].StartLimitIntervalSec = facts.Seconds(math.Inf(-1))
	var b bytes.Buffer
	err := WriteFacts(&b, &facts.Document{Units: units})
	require.Error(t, err)
	assert.Zero(t, b.Len(), "nothing written on failure")
	want := WriteJSON(io.Discard, &facts.Document{Units: units}, true)
	require.Error(t, want)
	assert.Equal(t, want.Error(), err.Error(), "the error encoding/json gives")

	failing := errors.New("disk full")
	doc := &facts.Document{Units: map[string]*facts.Unit{"a": {Name: "a"}}}
	assert.ErrorIs(t, WriteFacts(&chunks{fail: failing}, doc), failing)

	// The units are handed over piece by piece as they are done: a writer
	// failing on any of its writes gets no further write, and its error
	// is returned.
	units = map[string]*facts.Unit{}
	for i := range 200 {
		units[fmt.Sprint(i)] = &facts.Unit{Name: fmt.Sprint(i), Security: securityEdges()}
	}
	doc = &facts.Document{Units: units}
	var all chunks
	require.NoError(t, WriteFacts(&all, doc))
	require.Greater(t, all.writes, 25, "the units come in pieces")
	for n := range all.writes {
		w := &failAfter{n: n, err: failing}
		require.ErrorIs(t, WriteFacts(w, doc), failing, "failing on write %d", n)
		assert.Equal(t, n+1, w.writes, "no write after the failure")
		assert.True(t, bytes.HasPrefix(all.Bytes(), w.Bytes()), "what was written comes in order")
	}
}

// failAfter is a writer failing on its write number n (from 0) and after.
type failAfter struct {
	bytes.Buffer
	n, writes int
	err       error
}

func (f *failAfter) Write(p []byte) (int, error) {
	f.writes++
	if f.writes > f.n {
		return 0, f.err
	}
	return f.Buffer.Write(p)
}

// jsonMembers is the JSON member names of struct type T's fields, in order,
// each with its tag's options ("name,omitempty").
func jsonMembers[T any](t *testing.T) string {
	var names []string
	typ := reflect.TypeFor[T]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		require.False(t, f.Anonymous, "the facts writers do not flatten embedded fields")
		names = append(names, f.Tag.Get("json"))
	}
	return strings.Join(names, " ")
}

// TestFactsWritersKnowTheirTypes fails when a type WriteFacts writes by
// hand gains, loses or reorders a member: update WriteFacts (Document),
// appendUnit (Unit and what it holds; Security must stay a Unit's
// last member) or appendSecurity (Security, SecurityCheck, SecurityFix)
// with it. A member whose type changes no longer compiles there.
func TestFactsWritersKnowTheirTypes(t *testing.T) {
	for _, c := range []struct {
		members, want string
	}{
		{jsonMembers[facts.Document](t), "schema image systemd boot manager units config_files"},
		{jsonMembers[facts.Unit](t), "name unit_type state path,omitempty fragment,omitempty drop_ins aliases starts_at_boot " +
			"activated_by active_at_boot chain preset,omitempty conditions conditions_met conditions_reason,omitempty conditions_undecided,omitempty " +
			"would_run type,omitempty exec_start exec_start_pre restart restart_sec start_limit_interval_sec " +
			"start_limit_burst restart_prevent_exit_status user,omitempty group,omitempty dynamic_user environment_files " +
			"sandboxing wants requires after wanted_by spawns_container directives problems,omitempty security,omitempty"},
		{jsonMembers[facts.Exec](t), "path resolved,omitempty exists args prefixes raw error,omitempty"},
		{jsonMembers[facts.EnvironmentFile](t), "path optional exists"},
		{jsonMembers[unit.Edge](t), "from to kind source,omitempty assumes,omitempty"},
		{jsonMembers[condition.Check](t), "setting value trigger negate verdict reason"},
		{jsonMembers[facts.Security](t), "exposure level,omitempty checks top notes,omitempty error,omitempty"},
		{jsonMembers[facts.SecurityCheck](t), "name set exposure description"},
		{jsonMembers[facts.SecurityFix](t), "id name exposure"},
	} {
		assert.Equal(t, c.want, c.members, "a type the facts writer writes by hand changed: update it")
	}
	// None of these types writes itself (a Marshaler would change what
	// encoding/json writes); Seconds and Tenths do, and the writer calls
	// them.
	marshaler := reflect.TypeFor[json.Marshaler]()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[facts.Unit](), reflect.TypeFor[facts.Exec](), reflect.TypeFor[facts.EnvironmentFile](),
		reflect.TypeFor[unit.Edge](), reflect.TypeFor[condition.Check](), reflect.TypeFor[condition.Verdict](),
		reflect.TypeFor[facts.Security](), reflect.TypeFor[facts.SecurityCheck](), reflect.TypeFor[facts.SecurityFix](),
	} {
		assert.False(t, typ.Implements(marshaler) || reflect.PointerTo(typ).Implements(marshaler), "%s is a json.Marshaler", typ)
	}
}

// TestWriteFactsEveryUnitMember writes units with every member empty, nil,
// set, and holding what encoding/json escapes.
func TestWriteFactsEveryUnitMember(t *testing.T) {
	units := map[string]*facts.Unit{"zero.service": {}}
	for i := range 3 {
		u := fullUnit(rand.New(rand.NewPCG(uint64(i), 7)))
		units[fmt.Sprint(i, u.Name)] = u
	}
	yes := true
	units["every.service"] = &facts.Unit{
		Name: "every.service", Type: "service", State: "enabled", Path: "/p", Fragment: "/f",
		DropIns: []string{"/a.conf", "<b>"}, Aliases: []string{}, StartsAtBoot: true, ActivatedBy: nil, ActiveAtBoot: true,
		Chain:         []unit.Edge{{From: "a", To: "b", Kind: "Wants"}, {From: "b", To: "c", Kind: ".wants", Source: "/s"}},
		Preset:        "enable",
		Conditions:    []condition.Check{{Setting: "ConditionPathExists", Value: "!/x", Negate: true, Verdict: condition.True, Reason: "r&s"}},
		ConditionsMet: condition.Unknown, ConditionsReason: "why", ConditionsUndecided: []string{"ConditionVirtualization=|!container", "<x>"}, WouldRun: condition.False, ServiceType: "notify",
		ExecStart:    &facts.Exec{Path: "/bin/x", Resolved: "/usr/bin/x", Exists: &yes, Args: []string{}, Prefixes: "-", Raw: "-/bin/x", Error: "e"},
		ExecStartPre: []*facts.Exec{nil, {Path: "p", Args: []string{"1", "\u2028"}}},
		Restart:      "always", RestartSec: facts.Infinity, StartLimitIntervalSec: 0.1, StartLimitBurst: -3,
		RestartPreventExitStatus: []string{}, User: "u", Group: "g", DynamicUser: true,
		EnvironmentFiles: []facts.EnvironmentFile{{Path: "/e", Optional: true}, {}},
		Sandboxing:       map[string]string{"b": "1", "a": "<2>"},
		Wants:            []string{"w"}, Requires: nil, After: []string{}, WantedBy: []string{"x", "y"}, SpawnsContainer: true,
		Directives: map[string]map[string][]string{"Service": {"B": {"1", "2"}, "A": nil, "C": {}}, "Empty": {}, "Nil": nil},
		Problems:   []string{"p"},
		Security:   &facts.Security{Top: []facts.SecurityFix{{ID: "a<", Name: "n", Exposure: 95}, {}}, Notes: []string{}},
	}
	units["empty-top.service"] = &facts.Unit{Name: "empty-top.service", Problems: []string{}, Security: &facts.Security{Top: []facts.SecurityFix{}, Notes: []string{"n"}}}
	assertWritesAsWriteJSON(t, &facts.Document{Units: units})
}

// FuzzWriteUnit holds the hand-written unit members to encoding/json's on
// units drawn at random, every member empty, nil or set with strings that
// need escaping.
func FuzzWriteUnit(f *testing.F) {
	for i := range 8 {
		f.Add(uint64(i), uint64(i*31))
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		units := map[string]*facts.Unit{}
		for range 1 + r.IntN(10) {
			u := fullUnit(r)
			units[u.Name] = u
		}
		assertWritesAsWriteJSON(t, &facts.Document{Units: units})
	})
}

// fullUnit is a unit with each member drawn at random: nil, empty or set.
func fullUnit(r *rand.Rand) *facts.Unit {
	words := []string{"", "a", "ssh.service", "<html>", "a&b", "\"q\"", "back\\slash", "\u2028", "ü", "\xff\xfe", "\x00\x1f", "tab\t", "/usr/bin/x"}
	str := func() string { return words[r.IntN(len(words))] }
	strs := func() []string {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+r.IntN(3))
		for i := range out {
			out[i] = str()
		}
		return out
	}
	boolean := func() bool { return r.IntN(2) == 0 }
	exec := func() *facts.Exec {
		if r.IntN(4) == 0 {
			return nil
		}
		e := &facts.Exec{Path: str(), Resolved: str(), Args: strs(), Prefixes: str(), Raw: str(), Error: str()}
		if boolean() {
			v := boolean()
			e.Exists = &v
		}
		return e
	}
	seconds := func() facts.Seconds {
		return []facts.Seconds{0, 0.1, 90, 1e21, 1e-7, facts.Infinity, 12345.678}[r.IntN(7)]
	}
	u := &facts.Unit{
		Name: fmt.Sprint(r.Uint32(), str()), Type: str(), State: str(), Path: str(), Fragment: str(),
		DropIns: strs(), Aliases: strs(), StartsAtBoot: boolean(), ActivatedBy: strs(), ActiveAtBoot: boolean(),
		Preset: str(), ConditionsMet: condition.Verdict(str()), ConditionsReason: str(), ConditionsUndecided: strs(), WouldRun: condition.Verdict(str()),
		ServiceType: str(), ExecStart: exec(), Restart: str(), RestartSec: seconds(), StartLimitIntervalSec: seconds(),
		StartLimitBurst: r.IntN(2000) - 1000, RestartPreventExitStatus: strs(), User: str(), Group: str(),
		DynamicUser: boolean(), Wants: strs(), Requires: strs(), After: strs(), WantedBy: strs(), SpawnsContainer: boolean(),
		Problems: strs(),
	}
	if n := r.IntN(4); n > 0 {
		u.Chain = make([]unit.Edge, n-1)
		for i := range u.Chain {
			u.Chain[i] = unit.Edge{From: str(), To: str(), Kind: str(), Source: str()}
		}
	}
	if n := r.IntN(4); n > 0 {
		u.Conditions = make([]condition.Check, n-1)
		for i := range u.Conditions {
			u.Conditions[i] = condition.Check{Setting: str(), Value: str(), Trigger: boolean(), Negate: boolean(), Verdict: condition.Verdict(str()), Reason: str()}
		}
	}
	if n := r.IntN(4); n > 0 {
		u.ExecStartPre = make([]*facts.Exec, n-1)
		for i := range u.ExecStartPre {
			u.ExecStartPre[i] = exec()
		}
	}
	if n := r.IntN(4); n > 0 {
		u.EnvironmentFiles = make([]facts.EnvironmentFile, n-1)
		for i := range u.EnvironmentFiles {
			u.EnvironmentFiles[i] = facts.EnvironmentFile{Path: str(), Optional: boolean(), Exists: boolean()}
		}
	}
	if n := r.IntN(4); n > 0 {
		u.Sandboxing = map[string]string{}
		for range n - 1 {
			u.Sandboxing[str()] = str()
		}
	}
	if n := r.IntN(4); n > 0 {
		u.Directives = map[string]map[string][]string{}
		for range n - 1 {
			var keys map[string][]string
			if m := r.IntN(4); m > 0 {
				keys = map[string][]string{}
				for range m - 1 {
					keys[str()] = strs()
				}
			}
			u.Directives[str()] = keys
		}
	}
	if boolean() {
		s := &facts.Security{Level: str(), Notes: strs(), Error: str()}
		if n := r.IntN(4); n > 0 {
			s.Top = make([]facts.SecurityFix, n-1)
			for i := range s.Top {
				s.Top[i] = facts.SecurityFix{ID: str(), Name: str(), Exposure: security.Tenths(r.Uint64())}
			}
		}
		u.Security = s
	}
	return u
}

// TestWriteFactsWritesNil writes a nil document as WriteJSON does.
func TestWriteFactsWritesNil(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteFacts(&b, nil))
	assert.Equal(t, "null\n", b.String())
}

// FuzzAppendString holds appendString's fast path to encoding/json's
// escaping of every string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "PrivateTmp=", "a<b>&c", "\"\\", "\x00\x1f\x7f", "ü\u2028\u2029", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendString(nil, s)))
	})
}

// TestWriteFactsHostileSecurityPolicy: an image's own security policy can
// make the exposure arithmetic wrap (its weights are uint64); the facts
// are still exactly WriteJSON's and valid JSON, the exposure the wrapped
// number systemd prints (it was a negative int written as "-46….-8").
func TestWriteFactsHostileSecurityPolicy(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	aud, err := audit.New(audit.Config{FactsOnly: true})
	require.NoError(t, err)
	doc := factsOf(t, aud, src)
	src.Close()
	pol := map[string]any{}
	for _, u := range doc.Units {
		if u.Security != nil {
			for id := range u.Security.Checks {
				pol[id] = map[string]any{"weight": 0}
			}
		}
	}
	for id, w := range map[string]string{
		"CapabilityBoundingSet_CAP_NET_ADMIN": "1729382256910270464",
		"CapabilityBoundingSet_CAP_SYS_ADMIN": "622577612487697367",
		"AmbientCapabilities":                 "16094784204311583786",
	} {
		require.Contains(t, pol, id)
		pol[id] = map[string]any{"weight": json.Number(w)}
	}
	b, err := json.Marshal(pol)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/systemd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/systemd/systemd-analyze-security.policy"), b, 0o644))
	src, err = rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	doc = factsOf(t, aud, src)
	wrapped := 0
	for _, u := range doc.Units {
		if u.Security != nil && u.Security.Exposure != nil && *u.Security.Exposure > 1<<62 {
			wrapped++
			assert.Equal(t, "DANGEROUS", u.Security.Level, u.Name)
		}
	}
	require.Positive(t, wrapped, "the policy wraps some service's exposure")
	assertWritesAsWriteJSON(t, doc)
	var out bytes.Buffer
	require.NoError(t, WriteFacts(&out, doc))
	assert.True(t, json.Valid(out.Bytes()))
}
