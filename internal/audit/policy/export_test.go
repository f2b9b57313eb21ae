package policy

import (
	"context"
	"reflect"

	"github.com/amilint/amilint/internal/audit/finding"
)

// GoValue is goValue, for the benchmarks of package policy_test (which
// build real facts through package audit, which imports this one).
var GoValue = goValue

// CatalogInput is the input an engine of the catalog alone evaluates: v
// without what the catalog does not read.
func CatalogInput(v any) (any, error) { return prunedGoValue(v, unreadByCatalog()) }

// CatalogUnread is what the catalog's input leaves out, as a tree: member
// name ("*": every member without an entry of its own) → nil (left out),
// true (kept whole) or the tree of its members.
func CatalogUnread() map[string]any { return unreadByCatalog().tree().(map[string]any) }

// EvaluateThroughJSON is Evaluate as it was before directFindings: the
// result converted as rego converts it (ast.JSON), and decodeFindings
// decodes that through encoding/json.
func (e *Engine) EvaluateThroughJSON(ctx context.Context, input any) ([]finding.Finding, error) {
	t, err := e.term(ctx, input)
	if err != nil {
		return nil, err
	}
	return findingsOf(t, false)
}

// TakesDirectPath reports whether Evaluate's findings of input come from
// directFindings, not from the whole way through encoding/json.
func (e *Engine) TakesDirectPath(ctx context.Context, input any) (bool, error) {
	t, err := e.term(ctx, input)
	if err != nil || t == nil {
		return false, err
	}
	_, ok := directFindings(t.Value)
	return ok, nil
}

// Parts is how many queries Evaluate runs side by side.
func (e *Engine) Parts() int { return len(e.parts) }

// CatalogInputOnOneCore is CatalogInput converting every map on the
// calling goroutine (no prunedMapSplit).
func CatalogInputOnOneCore(v any) (any, error) {
	e := newGoEncoder()
	rv := reflect.ValueOf(v)
	n, err := e.pruned(rv, e.typ(rv.Type()), unreadByCatalog(), 0)
	if err != nil {
		return nil, err
	}
	return n.t.Value, nil
}
