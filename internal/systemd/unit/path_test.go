package unit

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSimplifyPath(t *testing.T) {
	max := "/" + strings.Repeat("a/", 2046) + "bc" // PATH_MAX-1 bytes
	tests := []struct {
		version  int
		in, want string
		why      string
	}{
		{252, "//etc/./ssh//", "/etc/ssh", ""},
		{252, "/etc/../x", "", "path is not normalized"},
		{252, "/../etc", "", "path is not normalized"},
		{257, "/../../etc", "/etc", ""}, // the root is its own parent from 257
		{257, "/etc/../x", "", "path is not normalized"},
		{252, "etc", "", "path is not absolute"},
		{252, "/" + strings.Repeat("a", 255), "/" + strings.Repeat("a", 255), ""},
		{252, "/" + strings.Repeat("a", 256), "", "path has an invalid length"},
		{252, max, max, ""},
		{252, max + "d", "", "path has an invalid length"},
		{252, "/\xff", "", "path is not valid UTF-8"},
		{252, "/\uFFFE", "", "path is not valid UTF-8"},
	}
	for _, tc := range tests {
		got, why := SimplifyPath(tc.version, tc.in, true)
		assert.Equal(t, tc.why, why, "%d %.40q (%d bytes)", tc.version, tc.in, len(tc.in))
		assert.Equal(t, tc.want, got, "%d %.40q (%d bytes)", tc.version, tc.in, len(tc.in))
	}
}

func TestValidDeviceNodePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/dev/null": true, "/dev": true, "/dev/sda1": true, "/dev/input/event0": true,
		"/run/systemd/inaccessible/chr": true, "/run/systemd/inaccessible": true,
		"/dev/": false, "/devices": false, "/tmp/x": false, "dev/null": false,
		"/dev/../etc": false, "/dev/./null": false, "/run/systemd/inaccessiblex": false, "": false,
	} {
		assert.Equal(t, want, ValidDeviceNodePath(p), p)
	}
}
