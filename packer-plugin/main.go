// Command packer-plugin-amilint is the amilint Packer plugin. Its
// provisioner audits the image being built and fails or fixes the build.
//
// It carries the guest build of amilint for linux/amd64 and linux/arm64
// (package guest) and uploads the one for the guest's architecture, so the
// engine on the guest is exactly the plugin's version, on any Packer host
// OS, and the guest needs no internet access.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/amilint/amilint/packer-plugin/provisioner/amilint"
	"github.com/amilint/amilint/packer-plugin/version"
)

func main() {
	pps := plugin.NewSet()
	pps.RegisterProvisioner(plugin.DEFAULT_NAME, new(amilint.Provisioner))
	pps.SetVersion(version.PluginVersion)
	if err := pps.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
		os.Exit(1)
	}
}
