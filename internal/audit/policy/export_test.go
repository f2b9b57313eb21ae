package policy

// GoValue is goValue, for the benchmarks of package policy_test (which
// build real facts through package audit, which imports this one).
var GoValue = goValue
