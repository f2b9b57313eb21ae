// Package facts owns the policy input document: what an image is and what
// its systemd units would do at boot, as one versioned JSON document with
// stable snake_case names (see docs/facts.md). It reads the image only
// through a *rootfs.FS, so it never reads the host, never writes, and treats
// every byte of the image as hostile: a corrupt file becomes a recorded
// problem or an error, never a panic.
package facts

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// Schema is the version tag of the facts document.
const Schema = "amilint-facts/v1"

// maxFileSize bounds how much of one small configuration file is read.
const maxFileSize = 1 << 20

// UnitInput is what the systemd model knows about one unit file; Build turns
// it into the unit's facts.
type UnitInput struct {
	// Name is the unit name ("ecs.service").
	Name string
	// State is the list-unit-files state ("enabled", "static", …).
	State string
	// Path is the image path of the unit file as listed.
	Path string
	// Fragment is the image path of the file that defines the unit, after
	// links ("" for a masked unit).
	Fragment string
	// DropIns are the image paths of the drop-ins applied, in order.
	DropIns []string
	// Aliases are the unit's other names.
	Aliases []string
	// StartsAtBoot reports whether the boot transaction starts the unit.
	StartsAtBoot bool
	// ActivatedBy names the sockets, timers and paths that activate it.
	ActivatedBy []string
	// Chain is why it starts: the edges from default.target to the unit.
	Chain []unit.Edge
	// Options are the fragment's options merged with its drop-ins', in
	// the order systemd applies them.
	Options []*unit.Option
	// Preset is the preset verdict for the unit ("enable", "disable", or
	// "" when no preset file speaks of it).
	Preset string
	// Conditions are the unit's Condition*= and Assert*= assignments
	// decided against the image (condition.Env.Unit).
	Conditions []condition.Check
	// Security is the service's assessment (security.go), or
	// SecurityError why it has none; both empty for units not assessed.
	Security      *security.Assessment
	SecurityError string
}

// ConfigRequest names a configuration file a rule asks about.
type ConfigRequest struct {
	// Path is the image-absolute path ("/etc/ecs/ecs.config").
	Path string
	// Format is "env" (KEY=VALUE), "json", "dir" or "file" (presence
	// only); "" guesses from the name: .json is json, .conf/.config/.env
	// and names without an extension are env, anything else file.
	Format string
}

// Options tunes Build.
type Options struct {
	// ConfigFiles are the files the loaded rules reference.
	ConfigFiles []ConfigRequest
	// Systemd is the systemd version the unit model followed.
	Systemd version.Info
	// Boot is the boot transaction as a whole.
	Boot Boot
	// Machine is what the image says about the machine it boots.
	Machine condition.Host
	// OmitChecks leaves every service's security.checks empty, for a
	// caller whose policies never read them (the built-in catalog alone:
	// policy.CatalogOnly); its 81 checks a service are most of the
	// document. The facts command and user policies get them.
	OmitChecks bool
}

// Document is the policy input.
type Document struct {
	Schema      string                 `json:"schema"`
	Image       Image                  `json:"image"`
	Systemd     version.Info           `json:"systemd"`
	Boot        Boot                   `json:"boot"`
	Manager     Manager                `json:"manager"`
	Units       map[string]*Unit       `json:"units"`
	ConfigFiles map[string]*ConfigFile `json:"config_files"`
}

// Boot is the initial boot transaction as a whole: what PID 1 isolates,
// and whether it can.
type Boot struct {
	// DefaultTarget is the unit default.target resolves to through its
	// alias ("graphical.target").
	DefaultTarget string `json:"default_target"`
	// Target is the unit PID 1 isolates: CommandLineUnit, else
	// DefaultTarget; rescue.target when that cannot be loaded.
	Target string `json:"target"`
	// CommandLineUnit is the unit the kernel command line names in
	// default.target's place (systemd.unit=, a runlevel word), as given;
	// "" when it names none.
	CommandLineUnit string `json:"command_line_unit,omitempty"`
	// Fallback is systemd's reason for falling back to rescue.target
	// ("Unit default.target is masked."); "" when it does not.
	Fallback string `json:"fallback,omitempty"`
	// Failed is systemd's reason when it cannot queue the transaction
	// ("Failed to isolate default target: Unit x.service is masked."):
	// the machine then reaches no target and no unit starts at boot. ""
	// when it can.
	Failed string `json:"failed,omitempty"`
	// FailedUnit is the unit that blocks the transaction.
	FailedUnit string `json:"failed_unit,omitempty"`
	// FailedChain is the requirements from default.target to FailedUnit.
	FailedChain []unit.Edge `json:"failed_chain,omitempty"`
	// OrderingCycles are the cycles of After=/Before= orderings among the
	// transaction's jobs, which systemd breaks by deleting a job.
	OrderingCycles []OrderingCycle `json:"ordering_cycles,omitempty"`
	// MayNotStart are the units with a start job that an ordering cycle
	// may cost it: systemd deletes one of several candidates, picked in
	// hash-table order, differently from boot to boot; sorted.
	MayNotStart []string `json:"may_not_start,omitempty"`
}

// OrderingCycle is one set of jobs ordered in a cycle.
type OrderingCycle struct {
	// Units are the units of the jobs (a strongly connected set of the
	// ordering), sorted.
	Units []string `json:"units"`
	// Deletable are the units among them whose job nothing the target
	// requires needs, which systemd may delete to break the cycle.
	Deletable []string `json:"deletable"`
	// Deleted are the units that certainly lose their job to it (the
	// one candidate and the units requiring it); absent when systemd
	// picks among several.
	Deleted []string `json:"deleted,omitempty"`
}

// Image is the image's identity.
type Image struct {
	// OSRelease holds every os-release field (ID, VERSION_ID, PRETTY_NAME…).
	OSRelease map[string]string `json:"os_release"`
	// MachineID is "present", "empty", "uninitialized", "missing" or
	// "unreadable" (a directory, a link loop, over 1 MiB).
	MachineID string `json:"machine_id"`
	// FirstBootPresets reports whether systemd will treat the first boot
	// as a first boot and apply presets to every unit (machine-id
	// missing, unreadable or "uninitialized").
	FirstBootPresets bool `json:"first_boot_presets"`
	// EtcLayout says where the image's /etc is: "etc", or "usr/etc" for an
	// ostree/bootc image that keeps its default /etc under /usr/etc and has
	// no /etc (that /usr/etc is read as /etc), or "none".
	EtcLayout string `json:"etc_layout"`
	// RuntimeFiles are the files and links the image ships under
	// /run/systemd (sorted, at most maxRuntimeFiles): a tmpfs replaces
	// /run at boot, so PID 1 never sees them.
	RuntimeFiles []string `json:"runtime_files"`
	// Machine is what the image says about the machine that boots it:
	// the kernel command lines its boot loader passes, its architecture,
	// its kernels, and what the user assumed (--assume).
	Machine condition.Host `json:"machine"`
	// Warnings say, one line each, why the tree read may not be the state
	// the image boots with (an XFS log left dirty by a snapshot of a
	// running system); empty when there is nothing to say.
	Warnings []string `json:"warnings,omitempty"`
	// Corrupt lists, one line each, the structures of the image that
	// failed their checksums and were read as stored because the target
	// was opened to allow it (--allow-corrupt); without that a mismatch
	// stops the audit. It is filled after everything else was read.
	Corrupt []string `json:"corrupt,omitempty"`
	// Disk is what the image's disk holds: every filesystem a mount can
	// name, when the target is a disk image; absent for a directory, a
	// tarball or a container image, whose disk amilint never sees.
	Disk *Disk `json:"disk,omitempty"`
}

// Disk is the filesystems of a disk image target (a raw, qcow2, vmdk,
// vhd(x) image, an EBS snapshot, an AMI), by the names udev gives them
// under /dev/disk; absent for a target with no disk amilint sees.
type Disk struct {
	// Volumes are the disk's partitions (or the whole disk) and logical
	// volumes, in table order.
	Volumes []DiskVolume `json:"volumes"`
	// OtherVolumes lists, one line each, what the machine has beside them
	// whose filesystems are unknown: an AMI's other EBS volumes ("/dev/sdb
	// snap-…"), a volume amilint does not recognise or could not read.
	// While there is one, a filesystem missing from Volumes may exist.
	OtherVolumes []string `json:"other_volumes"`
}

// DiskVolume is one volume of the disk: its filesystem's type, UUID and
// label, and its partition's PARTUUID and PARTLABEL, each as the
// /dev/disk/by-uuid, by-label, by-partuuid and by-partlabel link names it
// (lower-case UUIDs, a FAT volume id as XXXX-XXXX, a label encoded as
// udev encodes it, a space as \x20); "" for what it lacks.
type DiskVolume struct {
	Where     string `json:"where"`
	Type      string `json:"type"`
	UUID      string `json:"uuid"`
	Label     string `json:"label"`
	PartUUID  string `json:"partuuid"`
	PartLabel string `json:"partlabel"`
}

// readDisk turns what the view knows of its disk into the document's (nil
// when it knows none).
func readDisk(d *rootfs.Disk) *Disk {
	if d == nil {
		return nil
	}
	out := &Disk{Volumes: []DiskVolume{}, OtherVolumes: []string{}}
	for _, v := range d.Volumes {
		out.Volumes = append(out.Volumes, DiskVolume(v))
	}
	out.OtherVolumes = append(out.OtherVolumes, d.Other...)
	return out
}

// Manager holds the system manager defaults from system.conf and its
// drop-ins, falling back to systemd 252's built-in values.
type Manager struct {
	DefaultRestartSec            Seconds  `json:"default_restart_sec"`
	DefaultStartLimitIntervalSec Seconds  `json:"default_start_limit_interval_sec"`
	DefaultStartLimitBurst       int      `json:"default_start_limit_burst"`
	Sources                      []string `json:"sources"`
	Problems                     []string `json:"problems,omitempty"`
}

// Exec is one parsed Exec*= command.
type Exec struct {
	// Path is argv[0] with systemd's prefixes stripped, as written.
	Path string `json:"path"`
	// Resolved is the image path the executable resolves to ("" when
	// it cannot be found).
	Resolved string `json:"resolved,omitempty"`
	// Exists reports whether the executable exists in the image as a
	// regular file; null when it cannot be told (specifiers, variables).
	Exists *bool `json:"exists"`
	// Args are the remaining words.
	Args []string `json:"args"`
	// Prefixes are the stripped prefixes ("-", "+", "@", "!!"…).
	Prefixes string `json:"prefixes"`
	// Raw is the value as written.
	Raw string `json:"raw"`
	// Error is set when the value does not parse.
	Error string `json:"error,omitempty"`
}

// EnvironmentFile is one EnvironmentFile= reference.
type EnvironmentFile struct {
	Path     string `json:"path"`
	Optional bool   `json:"optional"`
	Exists   bool   `json:"exists"`
}

// Unit is one unit's facts.
type Unit struct {
	Name         string   `json:"name"`
	Type         string   `json:"unit_type"`
	State        string   `json:"state"`
	Path         string   `json:"path,omitempty"`
	Fragment     string   `json:"fragment,omitempty"`
	DropIns      []string `json:"drop_ins"`
	Aliases      []string `json:"aliases"`
	StartsAtBoot bool     `json:"starts_at_boot"`
	ActivatedBy  []string `json:"activated_by"`
	// ActiveAtBoot is true when the unit starts at boot or one of its
	// activators does: the units policies care about.
	ActiveAtBoot bool        `json:"active_at_boot"`
	Chain        []unit.Edge `json:"chain"`
	Preset       string      `json:"preset,omitempty"`
	// Conditions are the unit's Condition*= and Assert*= assignments, each
	// decided against the image: true, false or unknown, and why.
	Conditions []condition.Check `json:"conditions"`
	// ConditionsMet combines them as systemd does: every non-trigger check
	// holds, and one trigger check if there are any.
	ConditionsMet condition.Verdict `json:"conditions_met"`
	// ConditionsReason says which checks fail, when ConditionsMet is false.
	ConditionsReason string `json:"conditions_reason,omitempty"`
	// ConditionsUndecided are the checks the image cannot decide, as
	// written ("ConditionKernelCommandLine=snapd_recovery_mode"), when
	// ConditionsMet is unknown.
	ConditionsUndecided []string `json:"conditions_undecided,omitempty"`
	// WouldRun is whether the unit runs at boot given those verdicts:
	// false when it is not active at boot or its checks fail.
	WouldRun condition.Verdict `json:"would_run"`

	ServiceType              string            `json:"type,omitempty"`
	ExecStart                *Exec             `json:"exec_start"`
	ExecStartPre             []*Exec           `json:"exec_start_pre"`
	Restart                  string            `json:"restart"`
	RestartSec               Seconds           `json:"restart_sec"`
	StartLimitIntervalSec    Seconds           `json:"start_limit_interval_sec"`
	StartLimitBurst          int               `json:"start_limit_burst"`
	RestartPreventExitStatus []string          `json:"restart_prevent_exit_status"`
	User                     string            `json:"user,omitempty"`
	Group                    string            `json:"group,omitempty"`
	DynamicUser              bool              `json:"dynamic_user"`
	EnvironmentFiles         []EnvironmentFile `json:"environment_files"`
	Sandboxing               map[string]string `json:"sandboxing"`
	Wants                    []string          `json:"wants"`
	Requires                 []string          `json:"requires"`
	After                    []string          `json:"after"`
	WantedBy                 []string          `json:"wanted_by"`
	SpawnsContainer          bool              `json:"spawns_container"`
	// Directives are every merged option: section → key → values.
	Directives map[string]map[string][]string `json:"directives"`
	// Problems lists values that did not parse.
	Problems []string `json:"problems,omitempty"`
	// Security is a service's exposure (security.go).
	Security *Security `json:"security,omitempty"`
}

// ConfigFile is what a configuration file holds.
type ConfigFile struct {
	Path   string `json:"path"`
	Format string `json:"format"`
	Exists bool   `json:"exists"`
	// ParseOK reports that the file exists and parses cleanly in its format.
	ParseOK bool `json:"parse_ok"`
	// Keys are the variables of an env file.
	Keys map[string]string `json:"keys"`
	// Entries are the names in a directory.
	Entries []string `json:"entries,omitempty"`
	Size    int64    `json:"size"`
	Error   string   `json:"error,omitempty"`
}

// Build builds the facts document of the image fsys from the systemd
// model's units.
func Build(fsys *rootfs.FS, units []UnitInput, opts Options) (*Document, error) {
	if fsys == nil {
		return nil, fmt.Errorf("build facts: no image")
	}
	d := &Document{
		Schema:      Schema,
		Systemd:     opts.Systemd,
		Boot:        opts.Boot,
		Units:       make(map[string]*Unit, len(units)),
		ConfigFiles: map[string]*ConfigFile{},
	}
	var err error
	if d.Systemd.Major == 0 {
		if d.Systemd, err = version.Detect(fsys); err != nil {
			return nil, fmt.Errorf("build facts: %w", err)
		}
	}
	if d.Image, err = readImage(fsys); err != nil {
		return nil, fmt.Errorf("build facts: %w", err)
	}
	d.Image.Machine = opts.Machine
	d.Image.Disk = readDisk(fsys.Disk())
	if d.Image.Machine.CmdLines == nil {
		d.Image.Machine.CmdLines = []condition.CmdLine{}
	}
	if d.Image.Machine.Kernels == nil {
		d.Image.Machine.Kernels = []string{}
	}
	if d.Manager, err = readManager(fsys); err != nil {
		return nil, fmt.Errorf("build facts: %w", err)
	}
	res := newResolver(fsys)
	built := make([]*Unit, len(units))
	rootfs.ForEach(len(units), func(i int) { built[i] = buildUnit(res, &units[i], &d.Manager, opts.OmitChecks) })
	for _, u := range built {
		if _, dup := d.Units[u.Name]; dup {
			return nil, fmt.Errorf("build facts: unit %s listed twice", u.Name)
		}
		d.Units[u.Name] = u
	}
	// A unit activated by a unit that starts at boot is active at boot;
	// its chain is the activator's plus the activation edge.
	for _, u := range d.Units {
		u.ActiveAtBoot = u.StartsAtBoot
		if u.StartsAtBoot {
			continue
		}
		for _, a := range u.ActivatedBy {
			au, ok := d.Units[a]
			if !ok || !au.StartsAtBoot {
				continue
			}
			u.ActiveAtBoot = true
			if len(u.Chain) == 0 {
				u.Chain = append(slices.Clone(au.Chain), unit.Edge{From: a, To: u.Name, Kind: unit.Type(a)})
			}
			break
		}
	}
	// Whether each unit runs given its conditions: a started unit runs when
	// its own conditions and assertions hold; a unit only activated, when
	// they hold and one of its started activators runs.
	for _, u := range d.Units {
		switch {
		case !u.ActiveAtBoot:
			u.WouldRun = condition.False
		case u.StartsAtBoot:
			u.WouldRun = u.ConditionsMet
		}
	}
	for _, u := range d.Units {
		if !u.ActiveAtBoot || u.StartsAtBoot {
			continue
		}
		via := condition.False
		for _, a := range u.ActivatedBy {
			if au, ok := d.Units[a]; ok && au.StartsAtBoot {
				switch au.WouldRun {
				case condition.True:
					via = condition.True
				case condition.Unknown:
					if via == condition.False {
						via = condition.Unknown
					}
				}
			}
		}
		u.WouldRun = condition.Result([]condition.Check{{Verdict: u.ConditionsMet}, {Verdict: via}})
	}
	reqs := slices.Clone(opts.ConfigFiles)
	for _, u := range d.Units {
		for _, ef := range u.EnvironmentFiles {
			reqs = append(reqs, ConfigRequest{Path: ef.Path, Format: "env"})
		}
	}
	for _, r := range reqs {
		p := "/" + rootfs.Clean(r.Path)
		if _, ok := d.ConfigFiles[p]; ok {
			continue
		}
		d.ConfigFiles[p] = readConfig(fsys, p, r.Format)
	}
	// Last, when every read of the audit is done: what failed its
	// checksum on the way (a reader that records mismatches says so).
	if c, ok := fsys.Source().(interface{ Corruption() []string }); ok {
		d.Image.Corrupt = c.Corruption()
	}
	return d, nil
}

// readLimited reads at most maxFileSize bytes of name, following links
// inside the image.
func readLimited(fsys *rootfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("larger than %d bytes", maxFileSize)}
	}
	return b, nil
}

func guessFormat(p string) string {
	switch ext := path.Ext(p); ext {
	case ".json":
		return "json"
	case ".conf", ".config", ".env", "":
		return "env"
	}
	return "file"
}

func splitList(vs []string) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

// parseBool is parse_boolean of a trimmed value, false when it is none.
func parseBool(v string) bool {
	b, _ := unit.ParseBoolean(strings.TrimSpace(v))
	return b
}

func atoiBounded(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("parse %q: not a non-negative integer", truncate(v))
	}
	return n, nil
}
