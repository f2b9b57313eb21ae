package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	"github.com/amilint/amilint/internal/systemd/security"
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
	var b bytes.Buffer
	err := WriteFacts(&b, &facts.Document{Units: units})
	require.Error(t, err)
	assert.Zero(t, b.Len(), "nothing written on failure")

	failing := errors.New("disk full")
	doc := &facts.Document{Units: map[string]*facts.Unit{"a": {Name: "a"}}}
	assert.ErrorIs(t, WriteFacts(&chunks{fail: failing}, doc), failing)
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
// encodeUnit (Security must stay a Unit's last member) or appendSecurity
// (Security, SecurityCheck) with it.
func TestFactsWritersKnowTheirTypes(t *testing.T) {
	assert.Equal(t, "schema image systemd boot manager units config_files", jsonMembers[facts.Document](t),
		"facts.Document changed: update WriteFacts")
	unit := strings.Fields(jsonMembers[facts.Unit](t))
	assert.Equal(t, "security,omitempty", unit[len(unit)-1], "facts.Unit changed: encodeUnit appends security last")
	assert.Equal(t, "exposure level,omitempty checks top notes,omitempty error,omitempty", jsonMembers[facts.Security](t),
		"facts.Security changed: update appendSecurity")
	assert.Equal(t, "name set exposure description", jsonMembers[facts.SecurityCheck](t),
		"facts.SecurityCheck changed: update appendSecurity")
	// appendUnit splices the security in after the unit's other members:
	// its first member is always written, and none of these types writes
	// itself (a Marshaler would change what encoding/json writes).
	assert.Equal(t, "name", unit[0], "a Unit's first member has no omitempty")
	marshaler := reflect.TypeFor[json.Marshaler]()
	for _, typ := range []reflect.Type{reflect.TypeFor[facts.Unit](), reflect.TypeFor[facts.Security](), reflect.TypeFor[facts.SecurityCheck]()} {
		assert.False(t, typ.Implements(marshaler) || reflect.PointerTo(typ).Implements(marshaler), "%s is a json.Marshaler", typ)
	}
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
