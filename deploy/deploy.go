// Package deploy holds amilint's Kubernetes manifests for the fleet: the
// live auditor's DaemonSet, its Service and ServiceMonitor, the
// PrometheusRule with its alerts and the node-problem-detector plugin
// configuration. They are embedded so tests check what ships.
package deploy

import "embed"

// Manifests are the YAML files of this directory.
//
//go:embed *.yaml
var Manifests embed.FS
