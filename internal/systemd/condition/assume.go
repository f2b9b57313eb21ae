package condition

import (
	"fmt"
	"slices"
	"strings"
)

// Assumptions are what the user states about the machine that boots the
// image (`--assume KEY=VALUE`), by normalized key: the condition's name
// without its prefix, lower case, no dashes ("kernelcommandline").
type Assumptions map[string]string

// assumable are the keys --assume accepts: the host checks, and the image
// facts a user may know better (the kernel command line a cloud passes,
// the architecture, a first boot).
var assumable = []string{
	"virtualization", "architecture", "kernelcommandline", "kernelversion", "firstboot",
	"memory", "cpus", "acpower", "host", "security", "firmware", "cpufeature", "capability",
	"credential", "environment", "controlgroupcontroller", "datasource",
}

// normKey normalizes an assumption key or a condition kind:
// "Kernel-Command-Line", "ConditionKernelCommandLine" and
// "kernel_command_line" are all "kernelcommandline".
func normKey(k string) string {
	k = strings.ToLower(k)
	k = strings.TrimPrefix(k, "condition")
	if !strings.ContainsAny(k, "-_") {
		return k
	}
	b := make([]byte, 0, len(k))
	for i := 0; i < len(k); i++ {
		if c := k[i]; c != '-' && c != '_' {
			b = append(b, c)
		}
	}
	return string(b)
}

// assumeName is the dashed name of a condition kind for messages:
// "KernelCommandLine" is "kernel-command-line".
func assumeName(kind string) string {
	var b strings.Builder
	for i, r := range kind {
		if r >= 'A' && r <= 'Z' {
			if i > 0 && !(kind[i-1] >= 'A' && kind[i-1] <= 'Z') {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Set adds one KEY=VALUE assumption; it refuses a key no condition reads,
// so a typo cannot silently leave a check unknown.
func (a Assumptions) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("assumption %q: want KEY=VALUE, e.g. virtualization=amazon", kv)
	}
	key := normKey(strings.TrimSpace(k))
	if !slices.Contains(assumable, key) {
		names := make([]string, len(assumable))
		for i, n := range assumable {
			names[i] = dashed(n)
		}
		return fmt.Errorf("assumption %q: unknown key %q (known: %s)", kv, k, strings.Join(names, ", "))
	}
	a[key] = v
	return nil
}

// dashed spells a normalized key as the flag help does.
func dashed(k string) string {
	switch k {
	case "kernelcommandline":
		return "kernel-command-line"
	case "kernelversion":
		return "kernel-version"
	case "firstboot":
		return "first-boot"
	case "acpower":
		return "ac-power"
	case "cpufeature":
		return "cpu-feature"
	case "controlgroupcontroller":
		return "control-group-controller"
	}
	return k
}

func (a Assumptions) get(key string) (string, bool) {
	v, ok := a[key]
	return v, ok
}

// Virtualization is the virtualization --assume states, if it does.
func (a Assumptions) Virtualization() (string, bool) { return a.get("virtualization") }

// KernelCommandLine is the kernel command line --assume states, if it
// does.
func (a Assumptions) KernelCommandLine() (string, bool) { return a.get("kernelcommandline") }

// Architecture is the architecture --assume states, if it does.
func (a Assumptions) Architecture() (string, bool) { return a.get("architecture") }

// Datasource is the cloud datasource --assume states the machine offers,
// by cloud-init's ds-identify name (Ec2, GCE, Azure, ...), "none" for
// none, if it does.
func (a Assumptions) Datasource() (string, bool) { return a.get("datasource") }
