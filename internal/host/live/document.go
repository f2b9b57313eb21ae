package live

import (
	"slices"
	"time"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Document is the policy input of a live audit: the static facts of the
// host's root filesystem, exactly as a scan of that tree builds them, with
// each unit overlaid by what the running manager says of it, and the live
// section (the collectors' facts, the zombie figure at
// live.cgroups.memory.zombies). See docs/facts.md.
type Document struct {
	*facts.Document
	// Units shadow the static units: the same facts plus Runtime.
	Units map[string]*Unit `json:"units"`
	Live  *Facts           `json:"live"`
}

// Unit is one unit's static facts with its runtime state; Runtime is nil
// when systemd was not asked (the systemd collector did not run) or does
// not know the unit.
type Unit struct {
	*facts.Unit
	*Runtime
}

// Runtime is what the running manager says of one unit.
type Runtime struct {
	// FileState is the unit file state systemd reports ("enabled", …),
	// empty for units without a file (scopes, devices, transient units).
	FileState   string `json:"file_state,omitempty"`
	LoadState   string `json:"load_state,omitempty"`
	ActiveState string `json:"active_state,omitempty"`
	SubState    string `json:"sub_state,omitempty"`
	// ActiveNow is set for a service, socket, timer or path unit that is
	// active, activating or reloading now.
	ActiveNow bool `json:"active_now"`
	// Result, NRestarts, ExecMainStart and ExecArgv are set for loaded
	// services.
	Result        string     `json:"result,omitempty"`
	NRestarts     uint32     `json:"n_restarts"`
	ExecMainStart time.Time  `json:"exec_main_start,omitzero"`
	ExecArgv      [][]string `json:"exec_argv,omitempty"`
	// RestartsGrowth is how much NRestarts grew over the sample.
	RestartsGrowth uint32 `json:"restarts_growth"`
	// CrashLooping is the systemd collector's verdict (see bus.Detect);
	// the live-unit-crashloop policy decides from the fields above.
	CrashLooping        bool `json:"crash_looping"`
	ContainerPerRestart bool `json:"container_per_restart"`
}

// activeNowTypes are the unit types whose being active now is a choice
// the host made (work that runs); devices, mounts, scopes, slices and
// targets are active because of the kernel or a session.
var activeNowTypes = []string{"service", "socket", "timer", "path"}

var runningStates = []string{"active", "activating", "reloading"}

// NewDocument overlays the live facts f over the static facts of the
// host's root. It never changes static, so one static document serves
// many audits.
//
// On a live host a unit matters to the policies (active_at_boot) when the
// static model starts it at boot or when it is a service, socket, timer or
// path unit active now: running is the stronger evidence, and it catches
// units started by hand, by another unit or by a generator the static
// model cannot see. starts_at_boot stays the static model's answer.
func NewDocument(static *facts.Document, f *Facts) *Document {
	d := &Document{Document: static, Units: make(map[string]*Unit, len(static.Units)), Live: f}
	for name, u := range static.Units {
		cp := *u
		d.Units[name] = &Unit{Unit: &cp}
	}
	if f == nil || f.Systemd == nil {
		return d
	}
	looping := map[string]bool{}
	for _, n := range f.Systemd.CrashLooping {
		looping[n] = true
	}
	for _, su := range f.Systemd.Units {
		u, ok := d.Units[su.Name]
		if !ok {
			u = &Unit{Unit: runtimeOnly(su, static.Manager)}
			d.Units[su.Name] = u
		}
		rt := &Runtime{
			FileState: su.FileState, LoadState: su.LoadState, ActiveState: su.ActiveState, SubState: su.SubState,
			Result: su.Result, NRestarts: su.NRestarts, ExecMainStart: su.ExecMainStart, ExecArgv: su.ExecStart,
			CrashLooping: looping[su.Name], ContainerPerRestart: su.ContainerPerRestart,
		}
		if su.CrashLoop != nil {
			rt.RestartsGrowth = su.CrashLoop.Growth
		}
		rt.ActiveNow = slices.Contains(activeNowTypes, u.Type) && slices.Contains(runningStates, su.ActiveState)
		if rt.ActiveNow {
			u.ActiveAtBoot = true
		}
		u.Runtime = rt
	}
	return d
}

// runtimeOnly is the static facts of a unit only the manager knows: a
// unit without a file on the root (transient, generated) or one a unit
// directory the static model does not read holds. It has no options.
func runtimeOnly(su bus.Unit, m facts.Manager) *facts.Unit {
	restart := su.Restart
	if restart == "" {
		restart = "no"
	}
	return &facts.Unit{
		Name: su.Name, Type: unit.Type(su.Name), State: su.FileState,
		DropIns: []string{}, Aliases: []string{}, ActivatedBy: []string{}, Chain: []unit.Edge{},
		ExecStartPre: []*facts.Exec{}, Restart: restart, RestartSec: m.DefaultRestartSec,
		StartLimitIntervalSec: m.DefaultStartLimitIntervalSec, StartLimitBurst: m.DefaultStartLimitBurst,
		RestartPreventExitStatus: []string{}, EnvironmentFiles: []facts.EnvironmentFile{},
		Sandboxing: map[string]string{}, Wants: []string{}, Requires: []string{}, After: []string{}, WantedBy: []string{},
		SpawnsContainer: su.ContainerPerRestart, Directives: map[string]map[string][]string{},
	}
}
