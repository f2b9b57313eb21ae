package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestVersionOf(t *testing.T) {
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0982a2bf7c966e05c70362cf58a153c5f3bffbaa"}, {Key: "vcs.modified", Value: "true"},
		}}, "dev-0982a2bf7c96+dirty"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0982a2bf7c966e05c70362cf58a153c5f3bffbaa"}, {Key: "vcs.modified", Value: "false"},
		}}, "dev-0982a2bf7c96"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		assert.Equal(t, c.want, versionOf(&c.bi))
	}
}
