package policy

// GoValue is goValue, for the benchmarks of package policy_test (which
// build real facts through package audit, which imports this one).
var GoValue = goValue

// CatalogInput is the input an engine of the catalog alone evaluates: v
// without what the catalog does not read.
func CatalogInput(v any) (any, error) { return prunedGoValue(v, unreadByCatalog) }
