package condition

import (
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// readOSRelease reads /etc/os-release, else /usr/lib/os-release: KEY=VALUE
// lines, one level of quotes removed.
func readOSRelease(fsys *rootfs.FS) map[string]string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, ok, err := readSmall(fsys, p)
		if err != nil || !ok {
			continue
		}
		m := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			k, v, found := strings.Cut(l, "=")
			if !found || strings.HasPrefix(l, "#") {
				continue
			}
			m[k] = unquote(strings.TrimSpace(v))
		}
		return m
	}
	return map[string]string{}
}
