package facts

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGoldenDocument pins the amilint-facts/v1 JSON form of a small image:
// a change of a field name or shape shows up here (go test -update).
func TestGoldenDocument(t *testing.T) {
	ecs := readTestdata(t, "ecs.service")
	ssm := readTestdata(t, "amazon-ssm-agent.service")
	m := fstest.MapFS{
		"etc/os-release":                              file("ID=ubuntu\nVERSION_ID=\"20.04\"\nPRETTY_NAME=\"Ubuntu 20.04.6 LTS\"\n"),
		"etc/machine-id":                              file("0123456789abcdef0123456789abcdef\n"),
		"etc/systemd/system.conf":                     file("[Manager]\nDefaultStartLimitBurst=5\n"),
		"lib/systemd/system/ecs.service":              file(ecs),
		"lib/systemd/system/amazon-ssm-agent.service": file(ssm),
		"usr/libexec/amazon-ecs-init":                 exe(),
		"etc/ecs/ecs.config":                          file("ECS_CLUSTER=prod\n"),
	}
	d, err := Build(rootfs.New(m), []UnitInput{
		{
			Name: "ecs.service", State: "enabled", Path: "/lib/systemd/system/ecs.service",
			Fragment: "/lib/systemd/system/ecs.service", StartsAtBoot: true, Chain: ecsChain,
			Options: parseUnit(t, ecs), Preset: "disable",
		},
		{
			Name: "amazon-ssm-agent.service", State: "disabled", Path: "/lib/systemd/system/amazon-ssm-agent.service",
			Fragment: "/lib/systemd/system/amazon-ssm-agent.service", Options: parseUnit(t, ssm),
			Chain: []unit.Edge{},
		},
	}, Options{ConfigFiles: []ConfigRequest{{Path: "/etc/amazon/ssm/amazon-ssm-agent.json", Format: "json"}}})
	require.NoError(t, err)
	got, err := json.MarshalIndent(d, "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	const golden = "testdata/facts.golden.json"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "facts JSON changed; review and run go test ./internal/audit/facts -update")
}
