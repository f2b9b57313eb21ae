//go:build tools

// Package main's tools file pins packer-sdc, which generates the HCL2 spec
// (go generate) and checks the plugin (make e2e-packer).
package main

import _ "github.com/hashicorp/packer-plugin-sdk/cmd/packer-sdc"
