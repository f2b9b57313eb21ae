// Package version holds the plugin's version, set at release time.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

var (
	// Version is the release version, without the leading v.
	Version = "0.1.0"
	// VersionPrerelease marks development builds ("dev"); empty for releases.
	VersionPrerelease = "dev"
	// VersionMetadata is build metadata, if any.
	VersionMetadata = ""
	// PluginVersion is what Packer reads with `describe`.
	PluginVersion = version.NewPluginVersion(Version, VersionPrerelease, VersionMetadata)
)
