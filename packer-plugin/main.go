// Command packer-plugin-amilint is the amilint Packer plugin. Its
// provisioner audits the image being built and fails or fixes the build.
//
// The same binary is also amilint itself: run as
// `packer-plugin-amilint amilint ARGS...` it is the amilint CLI. The
// provisioner uploads it to the guest (when the guest is linux on the same
// architecture), so the engine on the guest is exactly the plugin's version
// and the guest needs no internet access.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/amilint/amilint/internal/cli"
	"github.com/amilint/amilint/packer-plugin/provisioner/amilint"
	"github.com/amilint/amilint/packer-plugin/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == amilint.EngineArg {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pps := plugin.NewSet()
	pps.RegisterProvisioner(plugin.DEFAULT_NAME, new(amilint.Provisioner))
	pps.SetVersion(version.PluginVersion)
	if err := pps.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
		os.Exit(1)
	}
}
