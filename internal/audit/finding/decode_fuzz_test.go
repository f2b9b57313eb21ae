package finding

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecode reads arbitrary report JSON (what `amilint report` is given):
// a report or an error, never a panic; a report that decodes encodes and
// decodes again to itself, and its exit code is computed.
func FuzzDecode(f *testing.F) {
	good, err := json.Marshal(NewReport(Target{Name: "ami-1", Kind: "ami"}, []Finding{{
		RuleID: "ecs-agent-unconfigured", Severity: High, Unit: "ecs.service", Message: "m",
		Remediation: Remediation{Action: "disable", Units: []string{"ecs.service"}}, Evidence: map[string]any{"n": 1.5},
	}}))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"schema": "amilint/v1", "findings": [{"severity": "bogus"}]}`))
	f.Add([]byte(`{"schema": "amilint/v1", "findings": [{"evidence": {"n": 1e2000000}}]}`))
	f.Add([]byte(`{"schema": "amilint/v2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		_ = ExitCode(r.Findings, High)
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a decoded report does not encode: %v", err)
		}
		r2, err := Decode(again)
		if err != nil {
			t.Fatalf("a re-encoded report does not decode: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normalize(t, r), normalize(t, r2)) {
			t.Fatalf("round trip changed the report:\n%s", again)
		}
	})
}

// normalize is a report's JSON form as generic values.
func normalize(t *testing.T, r *Report) any {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
