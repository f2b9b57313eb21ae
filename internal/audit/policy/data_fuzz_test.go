package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// FuzzData reads arbitrary --data files (JSON or YAML): data or an error,
// never a panic, and every number in data that loads compares without a
// panic (OPA panics on numbers it cannot hold; those must be refused at
// decode time).
func FuzzData(f *testing.F) {
	f.Add([]byte(`{"x": 1, "nested": {"a": [1.5, "s", null, true]}}`), false)
	f.Add([]byte("x: 1\nlist: [a, b]\nmap: {k: 1e3}\n"), true)
	f.Add([]byte(`{"x": 1e2000000}`), false)
	f.Add([]byte(`{"x": -1e-2000000}`), true)
	f.Add([]byte("&a [*a]"), true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, yaml bool) {
		name := filepath.Join(dir, "data.json")
		if yaml {
			name = filepath.Join(dir, "data.yaml")
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Data(Config{DataFiles: []string{name}})
		if err != nil {
			return
		}
		v, err := ast.InterfaceToValue(d["user"])
		if err != nil {
			if errors.Is(err, ErrNumberRange) {
				t.Fatalf("Data accepted a number out of range: %v", err)
			}
			return
		}
		ast.WalkTerms(v, func(x *ast.Term) bool {
			if n, ok := x.Value.(ast.Number); ok {
				ast.Compare(n, ast.Number("1"))
				ast.Compare(n, ast.Number("1e308"))
			}
			return false
		})
	})
}
