package facts

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// BenchmarkBuildDLAMI builds the facts of every unit file of the dlami
// fixture, materialized as a real directory tree (the os.Root path).
func BenchmarkBuildDLAMI(b *testing.B) {
	dir := b.TempDir()
	require.NoError(b, fixtures.Materialize("dlami", dir))
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	fsys := rootfs.New(src)
	var ins []UnitInput
	for _, d := range []string{"etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"} {
		ents, err := fsys.ReadDir(d)
		require.NoError(b, err)
		for _, e := range ents {
			if unit.Type(e.Name()) == "" {
				continue
			}
			in := UnitInput{Name: e.Name(), StartsAtBoot: true}
			if data, err := fsys.ReadFile(d + "/" + e.Name()); err == nil {
				if opts, err := unit.ParseConfig(data); err == nil {
					in.Options = opts
				}
			}
			ins = append(ins, in)
		}
	}
	seen := map[string]bool{}
	uniq := ins[:0]
	for _, in := range ins {
		if !seen[in.Name] {
			seen[in.Name] = true
			uniq = append(uniq, in)
		}
	}
	b.ReportMetric(float64(len(uniq)), "units")
	start := cpuTime()
	for b.Loop() {
		if _, err := Build(fsys, uniq, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
