package facts

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// defaultExecSearchPath is where systemd 252 looks up an executable named
// without a slash (DEFAULT_PATH with split-usr, as Debian and Ubuntu build it).
var defaultExecSearchPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// sandboxing lists the [Service] directives reported under "sandboxing".
var sandboxing = []string{
	"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateNetwork",
	"PrivateUsers", "PrivateIPC", "PrivateMounts", "NoNewPrivileges", "ProtectKernelTunables",
	"ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
	"ProtectHostname", "ProtectProc", "ProcSubset", "RestrictNamespaces", "RestrictRealtime",
	"RestrictSUIDSGID", "RestrictAddressFamilies", "LockPersonality", "MemoryDenyWriteExecute",
	"CapabilityBoundingSet", "AmbientCapabilities", "SystemCallFilter", "SystemCallArchitectures",
	"ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "DevicePolicy", "RemoveIPC", "UMask",
}

// containerCLIs are the commands whose "run" starts a new container.
var containerCLIs = []string{"docker", "podman", "nerdctl", "ctr", "crictl"}

const (
	secUnit    = "Unit"
	secService = "Service"
	secInstall = "Install"
)

func buildUnit(res *resolver, in *UnitInput, m *Manager, omitChecks bool) *Unit {
	u := &Unit{
		Name:                     in.Name,
		Type:                     unit.Type(in.Name),
		State:                    in.State,
		Path:                     in.Path,
		Fragment:                 in.Fragment,
		DropIns:                  nonNil(in.DropIns),
		Aliases:                  nonNil(in.Aliases),
		StartsAtBoot:             in.StartsAtBoot,
		ActivatedBy:              nonNil(in.ActivatedBy),
		Chain:                    slices.Clone(in.Chain),
		Preset:                   in.Preset,
		ExecStartPre:             []*Exec{},
		Restart:                  "no",
		RestartSec:               m.DefaultRestartSec,
		StartLimitIntervalSec:    m.DefaultStartLimitIntervalSec,
		StartLimitBurst:          m.DefaultStartLimitBurst,
		RestartPreventExitStatus: []string{},
		EnvironmentFiles:         []EnvironmentFile{},
		Sandboxing:               map[string]string{},
		Directives:               map[string]map[string][]string{},
	}
	if u.Chain == nil {
		u.Chain = []unit.Edge{}
	}
	u.Conditions = append([]condition.Check{}, in.Conditions...)
	u.ConditionsMet = condition.Result(in.Conditions)
	switch u.ConditionsMet {
	case condition.False:
		u.ConditionsReason = condition.Explain(in.Conditions)
	case condition.Unknown:
		u.ConditionsUndecided = condition.Undecided(in.Conditions)
	}
	u.Security = securityOf(in, omitChecks)
	opts := in.Options
	for _, o := range opts {
		sec := u.Directives[o.Section]
		if sec == nil {
			sec = map[string][]string{}
			u.Directives[o.Section] = sec
		}
		sec[o.Name] = append(sec[o.Name], o.Value)
	}
	u.Wants = splitList(depValues(opts, "Wants"))
	u.Requires = splitList(depValues(opts, "Requires"))
	u.After = splitList(depValues(opts, "After"))
	u.WantedBy = splitList(unit.Values(opts, secInstall, "WantedBy"))

	// Start rate limiting: [Unit] StartLimit*, with the deprecated
	// [Service] spellings applying to the same setting; the last wins.
	for _, o := range opts {
		switch {
		case o.Name == "StartLimitIntervalSec" && o.Section == secUnit,
			o.Name == "StartLimitInterval" && (o.Section == secUnit || o.Section == secService):
			if s, err := ParseSeconds(o.Value); err != nil {
				u.problem("%s: %v", o.Name, err)
			} else {
				u.StartLimitIntervalSec = s
			}
		case o.Name == "StartLimitBurst" && (o.Section == secUnit || o.Section == secService):
			if n, err := atoiBounded(o.Value); err != nil {
				u.problem("%s: %v", o.Name, err)
			} else {
				u.StartLimitBurst = n
			}
		}
	}
	if u.Type != "service" {
		return u
	}

	u.ServiceType = "simple"
	if v, ok := unit.Last(opts, secService, "Type"); ok && v != "" {
		u.ServiceType = v
	}
	if v, ok := unit.Last(opts, secService, "Restart"); ok && v != "" {
		u.Restart = v
	}
	if v, ok := unit.Last(opts, secService, "RestartSec"); ok && v != "" {
		if s, err := ParseSeconds(v); err != nil {
			u.problem("RestartSec: %v", err)
		} else {
			u.RestartSec = s
		}
	}
	u.RestartPreventExitStatus = splitList(unit.Values(opts, secService, "RestartPreventExitStatus"))
	u.User, _ = unit.Last(opts, secService, "User")
	u.Group, _ = unit.Last(opts, secService, "Group")
	if v, ok := unit.Last(opts, secService, "DynamicUser"); ok {
		u.DynamicUser = parseBool(v)
	}
	for _, k := range sandboxing {
		if v, ok := unit.Last(opts, secService, k); ok {
			u.Sandboxing[k] = v
		}
	}
	u.resolvePaths(res, opts, in.Name)
	return u
}

// resolvePaths fills a service's EnvironmentFiles, ExecStart and
// ExecStartPre from its options, resolving their paths through res.
func (u *Unit) resolvePaths(res *resolver, opts []*unit.Option, name string) {
	for _, v := range unit.Values(opts, secService, "EnvironmentFile") {
		ef := EnvironmentFile{Path: v}
		if strings.HasPrefix(v, "-") {
			ef.Optional, ef.Path = true, v[1:]
		}
		if !path.IsAbs(ef.Path) {
			u.problem("EnvironmentFile: %q is not an absolute path", truncate(ef.Path))
			continue
		}
		ef.Path = "/" + rootfs.Clean(ef.Path)
		_, ef.Exists = res.regular(rootfs.Clean(ef.Path))
		u.EnvironmentFiles = append(u.EnvironmentFiles, ef)
	}

	search := defaultExecSearchPath
	if v := splitPathList(unit.Values(opts, secService, "ExecSearchPath")); len(v) > 0 {
		search = v
	}
	if vs := unit.Values(opts, secService, "ExecStart"); len(vs) > 0 {
		u.ExecStart = buildExec(res, vs[0], name, search)
		u.SpawnsContainer = spawnsContainer(vs[0])
	}
	for _, v := range unit.Values(opts, secService, "ExecStartPre") {
		u.ExecStartPre = append(u.ExecStartPre, buildExec(res, v, name, search))
	}
}

// Prefetch resolves through fsys what Build will resolve for the unit
// in: a service's EnvironmentFile= files and executables. A model of a
// remote image calls it beside its other reads of each unit, so that
// these round trips overlap them; fsys remembering its answers
// (rootfs.FS.Memo), Build then reads nothing of them again.
func Prefetch(fsys *rootfs.FS, in *UnitInput) {
	if unit.Type(in.Name) == "service" {
		new(Unit).resolvePaths(newResolver(fsys), in.Options, in.Name)
	}
}

// depValues returns every value of a [Unit] dependency setting in order.
// Unlike unit.Values it does not reset on an empty assignment: systemd's
// config_parse_unit_deps ignores "Wants=" (dependencies cannot be reset).
func depValues(opts []*unit.Option, name string) []string {
	var out []string
	for _, o := range opts {
		if o.Section == secUnit && o.Name == name {
			out = append(out, o.Value)
		}
	}
	return out
}

func (u *Unit) problem(format string, args ...any) {
	if len(u.Problems) < 100 {
		u.Problems = append(u.Problems, fmt.Sprintf(format, args...))
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

func splitPathList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, p := range strings.Split(v, ":") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// buildExec parses one Exec*= value of unit name and finds its executable
// in the image as systemd would.
func buildExec(res *resolver, raw, name string, search []string) *Exec {
	e := &Exec{Raw: raw, Args: []string{}}
	c, err := ParseCommand(raw)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Prefixes = c.Prefixes
	e.Args = c.Argv[1:]
	e.Path, err = expandSpecifiers(c.Argv[0], name)
	if err != nil {
		e.Error = "executable path: " + err.Error()
		return e
	}
	if strings.ContainsAny(e.Path, "%$") {
		return e // cannot be told statically
	}
	var candidates []string
	switch {
	case path.IsAbs(e.Path):
		candidates = []string{e.Path}
	case strings.Contains(e.Path, "/"):
		// systemd refuses a relative path with a slash.
		e.Error = "executable path is neither absolute nor a plain name"
		f := false
		e.Exists = &f
		return e
	default:
		for _, d := range search {
			candidates = append(candidates, path.Join(d, e.Path))
		}
	}
	found := false
	for _, p := range candidates {
		r, ok := res.regular(rootfs.Clean(p))
		if !ok {
			continue
		}
		e.Resolved = "/" + r
		found = true
		break
	}
	e.Exists = &found
	return e
}

// expandSpecifiers expands the unit-name specifiers that can appear in an
// executable path; the rest stay, so the caller can see them. Past
// unit.PathPrintfMax bytes it fails with unit.ErrExpansionTooLong, as systemd's
// expansion of an executable does.
func expandSpecifiers(s, name string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	inst, _ := unit.Instance(name)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if b.Len() > unit.PathPrintfMax {
			return "", unit.ErrExpansionTooLong
		}
		c := s[i]
		if c != '%' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'n':
			b.WriteString(name)
		case 'N':
			b.WriteString(strings.TrimSuffix(name, "."+unit.Type(name)))
		case 'p':
			b.WriteString(unit.Prefix(name))
		case 'i', 'I':
			b.WriteString(inst)
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	if b.Len() > unit.PathPrintfMax {
		return "", unit.ErrExpansionTooLong
	}
	return b.String(), nil
}

// spawnsContainer reports whether an ExecStart value starts a new container
// each time it runs: a container CLI's "run" (directly or inside sh -c), or
// amazon-ecs-init start, whose supervisor creates a new agent container per
// attempt.
func spawnsContainer(raw string) bool {
	c, err := ParseCommand(raw)
	if err != nil {
		return false
	}
	words := c.Argv
	// Look inside "sh -c SCRIPT".
	if b := path.Base(words[0]); b == "sh" || b == "bash" || b == "dash" {
		for i := 1; i+1 < len(words); i++ {
			if words[i] == "-c" {
				inner, err := splitWords(words[i+1])
				if err == nil {
					words = inner
				} else {
					words = strings.Fields(words[i+1])
				}
				break
			}
		}
	}
	for i, w := range words {
		b := path.Base(w)
		if b == "amazon-ecs-init" && slices.Contains(words[i+1:], "start") {
			return true
		}
		if b == "docker-compose" && slices.Contains(words[i+1:], "up") {
			return true
		}
		if !slices.Contains(containerCLIs, b) {
			continue
		}
		for _, a := range words[i+1:] {
			if a == "&&" || a == ";" || a == "|" || a == "||" {
				break
			}
			if a == "run" || (b == "docker" && a == "compose" && slices.Contains(words[i+1:], "up")) {
				return true
			}
		}
	}
	return false
}
