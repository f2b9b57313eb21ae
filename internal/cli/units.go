package cli

import "errors"

// runUnits is replaced by the systemd model's wiring (issue 2).
func runUnits(e *env, args []string) int {
	return fail(e, "units", errors.New("not built yet"))
}
