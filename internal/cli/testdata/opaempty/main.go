// Command opaempty does nothing but link OPA's rego package: its run time
// is the start-up floor amilint's own start-up is measured against in
// make bench (BenchmarkCommands).
package main

import _ "github.com/open-policy-agent/opa/v1/rego"

func main() {}
