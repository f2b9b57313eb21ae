package live

import (
	"fmt"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/sdbus"
)

// Rule ids of the live findings.
const (
	RuleMemcgZombies       = "live-memcg-zombies"
	RuleUnitCrashLoop      = "live-unit-crashloop"
	RuleContainerPerStart  = "live-container-per-restart"
	RuleIRQCoreSaturated   = "live-irq-core-saturated"
	RuleCoreSaturated      = "live-core-saturated"
	rebootPurgesZombieText = "A reboot is what purges the memory cgroups already leaked; stopping or disabling the leaking unit only stops the growth."
)

// Findings derives the live findings from the facts, in a stable order.
// They are simple rules on the facts; the policy engine may take over.
func Findings(f *Facts) []finding.Finding {
	var out []finding.Finding
	if c := f.Cgroups; c != nil && c.Memory != nil && c.Memory.Zombies >= f.Thresholds.Zombies {
		m := c.Memory
		msg := fmt.Sprintf("%d zombie memory cgroups: the kernel tracks %d memory cgroups but only %d exist in %s",
			m.Zombies, m.Tracked, m.Present, m.Hierarchy)
		if c.Suspect != "" {
			msg += fmt.Sprintf("; suspect %s: %s", c.Suspect, c.Why)
		}
		ev := map[string]any{"zombies": m.Zombies, "tracked": m.Tracked, "present": m.Present, "cgroup_version": m.Version}
		if c.Growth != nil {
			ev["growth"] = c.Growth.Zombies
		}
		rem := finding.Remediation{Action: "none", Text: rebootPurgesZombieText, Commands: []string{"systemctl reboot"}}
		if c.Suspect != "" {
			rem = finding.Remediation{Action: "disable", Units: []string{c.Suspect}, Text: rebootPurgesZombieText,
				Commands: []string{"systemctl disable --now " + c.Suspect, "systemctl reboot"}}
		}
		out = append(out, finding.Finding{
			RuleID: RuleMemcgZombies, Title: "Zombie memory cgroups", Severity: finding.High, Unit: c.Suspect,
			Message: msg, Remediation: rem, Evidence: ev,
			References: []string{"https://www.kernel.org/doc/html/latest/admin-guide/cgroup-v2.html"},
		})
	}
	if s := f.Systemd; s != nil {
		for _, u := range s.Units {
			if u.CrashLoop == nil {
				continue
			}
			msg := fmt.Sprintf("%s is crash-looping: %s", u.Name, strings.Join(u.CrashLoop.Reasons, "; "))
			if u.ContainerPerRestart {
				msg += "; each restart creates a new container and memory cgroup"
			}
			out = append(out, finding.Finding{
				RuleID: RuleUnitCrashLoop, Title: "Crash-looping unit", Severity: finding.High, Unit: u.Name, Message: msg,
				Remediation: finding.Remediation{Action: "disable", Units: []string{u.Name},
					Commands: []string{"systemctl disable --now " + u.Name},
					Text:     "Disable the unit if the host does not need it, or fix its configuration."},
				Evidence: map[string]any{"n_restarts": u.NRestarts, "sub_state": u.SubState, "result": u.Result, "file_state": u.FileState},
			})
		}
		for _, n := range s.ContainerPerRestart {
			u, _ := unitByName(s.Units, n)
			sev := finding.Medium
			if u.CrashLoop != nil {
				sev = finding.High
			}
			out = append(out, finding.Finding{
				RuleID: RuleContainerPerStart, Title: "Service creates a container per restart", Severity: sev, Unit: n,
				Message: fmt.Sprintf("%s (%s, %s) starts a new container on every start (%s): each restart leaves a memory cgroup that page cache can keep alive",
					n, orDash(u.FileState), orDash(u.ActiveState), execString(u.ExecStart)),
				Remediation: finding.Remediation{Action: "disable", Units: []string{n},
					Commands: []string{"systemctl disable --now " + n},
					Text:     "Disable it unless the host needs it; " + rebootPurgesZombieText},
				Evidence: map[string]any{"exec_start": u.ExecStart, "n_restarts": u.NRestarts},
			})
		}
	}
	if r := f.CPU; r != nil {
		for _, s := range r.Saturated {
			rule, sev, title := RuleCoreSaturated, finding.Medium, "Saturated core"
			if len(s.NICs) > 0 {
				rule, sev, title = RuleIRQCoreSaturated, finding.High, "Saturated core serving network interrupts"
			}
			out = append(out, finding.Finding{
				RuleID: rule, Title: title, Severity: sev, Message: s.Statement,
				Remediation: finding.Remediation{Action: "none",
					Text: "Find what runs in the kernel on that core (per-core mpstat, perf record -C); a saturated core serving NIC interrupts starves NAPI polling and makes the driver reset the device."},
				Evidence: map[string]any{"cpu": s.CPU, "system": s.System, "nics": s.NICs, "machine_busy": s.MachineBusy},
			})
		}
	}
	return out
}

func unitByName(us []sdbus.Unit, name string) (sdbus.Unit, bool) {
	i := slices.IndexFunc(us, func(u sdbus.Unit) bool { return u.Name == name })
	if i < 0 {
		return sdbus.Unit{}, false
	}
	return us[i], true
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func execString(cmds [][]string) string {
	parts := make([]string, 0, len(cmds))
	for _, c := range cmds {
		parts = append(parts, strings.Join(c, " "))
	}
	return strings.Join(parts, "; ")
}
