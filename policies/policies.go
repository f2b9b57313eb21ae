// Package policies holds amilint's default Rego policies and their tests,
// embedded so the binary needs no files at run time. The tree under
// amilint/ mirrors the Rego package paths: amilint/main.rego is package
// amilint (the one entry point, data.amilint.findings), amilint/lib holds
// shared helpers, and amilint/rules/NAME holds one rule family's package
// amilint.rules.NAME with its NAME_test.rego. See docs/facts.md for the
// input document the policies read.
package policies

import "embed"

// FS holds every embedded .rego file, tests included, under "amilint/".
//
//go:embed amilint
var FS embed.FS
