package boot

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// TestOracleInstancePrefixDropIns checks, against systemd --test, the
// drop-in and .wants directories an instance with a dash in its name gets
// through its prefix: unit_file_find_dirs keeps the instance in the prefix
// name (r-@one.service.d), and also looks at the template's prefix dirs
// (r-.service.d, r-@.service.d).
func TestOracleInstancePrefixDropIns(t *testing.T) {
	const dir = "/etc/systemd/system/"
	started := []string{"inst-prefix.service", "tmpl-prefix.service", "plain-prefix.service", "inst-prefix-link.service"}
	ops := []op{
		file(dir+"r-x@.service", svc),
		link(dir+"multi-user.target.wants/r-x@one.service", dir+"r-x@.service"),
		file(dir+"r-@one.service.d/inst.conf", "[Unit]\nWants=inst-prefix.service\n"),
		file(dir+"r-@.service.d/tmpl.conf", "[Unit]\nWants=tmpl-prefix.service\n"),
		file(dir+"r-.service.d/plain.conf", "[Unit]\nWants=plain-prefix.service\n"),
		link(dir+"r-@one.service.wants/inst-prefix-link.service", dir+"inst-prefix-link.service"),
		// Another instance's prefix dir is not looked at. (Each drop-in has
		// its own file name: the first file of a name wins.)
		file(dir+"r-@two.service.d/other.conf", "[Unit]\nWants=other-inst.service\n"),
	}
	for _, n := range append(started, "other-inst.service") {
		ops = append(ops, file(dir+n, svc))
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			v := newVariant(t, sd, ops)
			want := v.oracle(t)
			got, _ := modelStart(t, v)
			assert.Equal(t, want.Start, got)
			for _, n := range started {
				assert.Contains(t, want.Start, n, "systemd starts %s", n)
			}
			assert.NotContains(t, want.Start, "other-inst.service")
		})
	}
}
