package boot

import (
	"bytes"
	"iter"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
)

// cloud-init's generator (cloud-init-generator, a sh script) links
// cloud-init.target into multi-user.target.wants of the early directory
// when cloud-init is to run, and its services are only WantedBy=
// cloud-init.target. Whether it is to run is the exit code of ds-identify
// (/usr/lib/cloud-init/ds-identify, another sh script), which reads the
// image's /etc/cloud, the kernel command line and the machine's DMI data.
// The model ports both scripts' decision for a boot on a virtual machine
// (no container): the image's side exactly, the machine's side as the
// assumption of Options.Machine — which datasource the machine offers,
// or, by default, one of the image's datasource_list: the cloud the image
// is built for. The generator names ds-identify in its template section
// (/usr/libexec/cloud-init/ds-identify on Fedora and RHEL and those
// derived from them). The scripts differ between cloud-init versions (22.4 in
// Debian 12: the generator reads cloud-init= and
// /etc/cloud/cloud-init.{enabled,disabled} itself; 25.x in Debian 13:
// ds-identify decides everything); the port reads the image's own scripts
// for which of their variants, and which compiled-in defaults, apply,
// and writes nothing (the unported state) when it cannot tell. Checked
// against the scripts of upstream 22.4 to 26.2 as Debian and Ubuntu (which
// ships them unpatched, with upstream's default policy) render them.

// cloudInitGeneratorName is cloud-init's generator executable.
const cloudInitGeneratorName = "cloud-init-generator"

// maxScript bounds the scripts and configuration files the port reads;
// maxConfig the configuration files together, and their number.
const (
	maxScript      = 1 << 20
	maxConfig      = 16 << 20
	maxConfigFiles = 4096
)

// Exit codes of ds-identify's _main.
const (
	diFound    = 0 // enable cloud-init
	diDisabled = 1 // no datasource found, or mode=disabled
	diOff      = 2 // 25.x is_disabled: cloud-init=disabled, cloud-init.disabled
	diError    = 3 // "Unexpected result": a policy without mode or notfound
)

// genCloudInit ports cloud-init-generator's main: the early link when
// cloud-init is enabled and a datasource found, nothing otherwise (the
// early directory is empty, so removing the link is nothing either).
func genCloudInit(r genRun) {
	gen, ok := readCloudInitGenerator(r.fsys, r.exe)
	if !ok {
		return
	}
	note, enable := gen.decide(r)
	if enable {
		dir := genDirEarly + "/multi-user.target.wants"
		if r.out.symlink(gen.target, dir, "cloud-init.target", r.exe) && note != "" {
			r.out.nodes[dir+"/cloud-init.target"].assumes = note
		}
	}
}

// ciGenerator is what the port reads from cloud-init-generator: its
// template section and whether it decides itself (22.4) or leaves it all
// to ds-identify (25.x).
type ciGenerator struct {
	target     string // CLOUD_SYSTEM_TARGET
	dsidentify string // dsidentify
	// ownSearch is main's "for search in kernel_cmdline etc_file
	// default" of 22.4.
	ownSearch bool
}

// readCloudInitGenerator reads the generator script; false when it is not
// one the port knows.
func readCloudInitGenerator(fsys *rootfs.FS, exe string) (ciGenerator, bool) {
	data, ok := readScript(fsys, exe)
	if !ok {
		return ciGenerator{}, false
	}
	g := ciGenerator{target: shAssign(data, "CLOUD_SYSTEM_TARGET"), dsidentify: shAssign(data, "dsidentify")}
	if g.target == "" || !path.IsAbs(g.dsidentify) ||
		shAssign(data, "CLOUD_TARGET_NAME") != "cloud-init.target" ||
		!bytes.Contains(data, []byte(`local target_name="multi-user.target" gen_d="$early_d"`)) {
		return ciGenerator{}, false
	}
	g.ownSearch = bytes.Contains(data, []byte("for search in kernel_cmdline etc_file default; do"))
	if !g.ownSearch && !bytes.Contains(data, []byte(`$dsidentify`+"\n    ds=$?")) {
		return ciGenerator{}, false
	}
	return g, true
}

// readScript reads a script of the image (links followed), at most
// maxScript bytes; false when it is no regular file or larger.
func readScript(fsys *rootfs.FS, p string) ([]byte, bool) {
	p = rootfs.Clean(p)
	fi, err := fsys.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxScript {
		return nil, false
	}
	data, err := fsys.ReadFile(p)
	return data, err == nil && len(data) <= maxScript
}

// shAssign returns the value of the one line NAME="VALUE" of a script
// (blanks before it allowed), "" when there is none, more
// than one, or a value the shell would expand.
func shAssign(data []byte, name string) string {
	val := ""
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimLeft(l, " \t")
		rest, ok := strings.CutPrefix(l, name+`="`)
		if !ok {
			continue
		}
		v, ok := strings.CutSuffix(strings.TrimRight(rest, " \t"), `"`)
		if !ok || strings.ContainsAny(v, "\"$`\\") || val != "" {
			return ""
		}
		val = v
	}
	return val
}

// decide is the generator's main: whether it links cloud-init.target,
// and, when the machine's datasource decided it, what the model assumed.
func (g ciGenerator) decide(r genRun) (note string, enable bool) {
	cmdline := shReadFirst(r.cmdline)
	if g.ownSearch {
		// 22.4: kernel_cmdline, etc_file, default; "disabled" ends it.
		switch result := ciKernelCmdline(cmdline); {
		case result == "disabled":
			return "", false
		case result == "" && isRegular(r.fsys, "etc/cloud/cloud-init.enabled"):
		case result == "" && isRegular(r.fsys, "etc/cloud/cloud-init.disabled"):
			return "", false
		}
		// check_for_datasource: no executable ds-identify enables.
		if !accessExec(r.fsys, g.dsidentify) {
			return "", true
		}
	} else if !accessExec(r.fsys, g.dsidentify) {
		// 25.x runs it anyway: 126 or 127, an unexpected result.
		return "", false
	}
	di, ok := readDSIdentify(r.fsys, g.dsidentify)
	if !ok {
		return "", false // refuse to guess
	}
	rc, note, ok := di.main(r.fsys, cmdline, r.machine)
	if !ok {
		return "", false
	}
	return note, rc == diFound
}

// ciKernelCmdline is 22.4's kernel_cmdline: the value of the last
// cloud-init= word, when "enabled" or "disabled", else "".
func ciKernelCmdline(cmdline string) string {
	c := " " + cmdline + " "
	i := strings.LastIndex(c, " cloud-init=")
	if i < 0 {
		return ""
	}
	tok, _, _ := strings.Cut(c[i+len(" cloud-init="):], " ")
	if tok == "enabled" || tok == "disabled" {
		return tok
	}
	return ""
}

// isRegular is test -f: a regular file, links followed.
func isRegular(fsys *rootfs.FS, p string) bool {
	fi, err := fsys.Stat(rootfs.Clean(p))
	return err == nil && fi.Mode().IsRegular()
}

// isDir is test -d.
func isDir(fsys *rootfs.FS, p string) bool {
	fi, err := fsys.Stat(rootfs.Clean(p))
	return err == nil && fi.IsDir()
}

// dsIdentify is what the port reads from a ds-identify script: its
// compiled-in defaults, the datasources it has a dscheck_ function for,
// and which variant of each function it runs.
type dsIdentify struct {
	policy, policyNoDMI string // DI_DEFAULT_POLICY, DI_DEFAULT_POLICY_NO_DMI
	dslist              string // DI_DSLIST_DEFAULT
	checks              map[string]bool
	// Later releases (23.4 on, 24.1 not grepping): is_disabled, the
	// cmdline's ds= key and its ";" cut, a check_config that greps
	// (grepConfig; grepQuote23 for 23.4's pattern), datasource_list only
	// as a flow sequence, a trim that keeps inner blanks, NoCloud's
	// seedfrom.
	isDisabled, dsKey, semicolon, grepConfig, grepQuote23, flowSeq, trimEnds, seedfrom bool
	// 22.4: NoCloud's check of " ds=nocloud" on the command line.
	nocloudCmdline bool
	// Up to 25.1: MAAS is found by a MAAS: key in the configuration.
	maasConfig bool
}

var (
	nocloudCmd = regexp.MustCompile(`case " \$\{DI_KERNEL_CMDLINE\} " in\s+\*\\ ds=nocloud\*\) return \$\{DS_FOUND\};;`)
)

// readDSIdentify reads the image's ds-identify; false when the script is
// not one the port knows (its defaults not found, or an environment
// file it would source).
func readDSIdentify(fsys *rootfs.FS, p string) (dsIdentify, bool) {
	data, ok := readScript(fsys, p)
	if !ok {
		return dsIdentify{}, false
	}
	s := string(data)
	// Markers are matched with blanks removed on both sides: 26.2
	// reformatted the script (shfmt) without changing what it does.
	sq := unblank(s)
	has := func(m string) bool { return strings.Contains(sq, unblank(m)) }
	for _, m := range []string{"read_datasource_list() {", "parse_policy() {", "_main() {", `found "$DI_DSNAME"`,
		`DI_ENABLED="enabled"`, `DI_DISABLED="disabled"`, "i?86|x86_64) def=${DI_DEFAULT_POLICY};;"} {
		if !has(m) {
			return dsIdentify{}, false
		}
	}
	// get_environment sources PATH_DI_ENV: anything may follow.
	if strings.Contains(s, "PATH_DI_ENV") && exists(fsys, "usr/libexec/ds-identify-env") {
		return dsIdentify{}, false
	}
	di := dsIdentify{
		policy:         shDefault(s, "DI_DEFAULT_POLICY"),
		policyNoDMI:    shDefault(s, "DI_DEFAULT_POLICY_NO_DMI"),
		dslist:         shDefault(s, "DI_DSLIST_DEFAULT"),
		checks:         map[string]bool{},
		isDisabled:     strings.Contains(s, "\nis_disabled() {"),
		dsKey:          has(`ds) _rc_dsname="$val";;`),
		semicolon:      has("val=${val%%;*}"),
		flowSeq:        has(`check_config "$key" && get_single_line_flow_sequence "$key" "$_RET"`),
		trimEnds:       has(`tmp="${cur#[[:space:]]}"`),
		seedfrom:       has(`check_config "seedfrom"`),
		nocloudCmdline: nocloudCmd.MatchString(s),
		maasConfig:     has(`check_config "MAAS"`),
	}
	// check_config is one of three: 22.4's read loop (back in 24.1), 23.4's
	// grep of key"\?: or 24.2's of key["\']*[[:space:]]*:; anything else
	// the port does not know.
	readLoop := has(`$key:\ *|"${key}":)`)
	grep23, grep24 := has(`out=$(grep "$key\"\?:" "$@"`), has(`out=$(grep "$key[\"\']*[[:space:]]*:" "$@"`)
	switch {
	case readLoop && !grep23 && !grep24:
	case grep23 && !readLoop && !grep24:
		di.grepConfig, di.grepQuote23 = true, true
	case grep24 && !readLoop && !grep23:
		di.grepConfig = true
	default:
		return dsIdentify{}, false
	}
	if di.policy == "" || di.policyNoDMI == "" || di.dslist == "" {
		return dsIdentify{}, false
	}
	for name := range dscheckNames(s) {
		di.checks[name] = true
	}
	return di, true
}

// dscheckNames yields NAME of each "dscheck_NAME() {" at the start of a
// line of script s: the datasource checks it defines. (A scan by hand:
// the regular expression it replaces took a tenth of the boot model's
// time on a 60 KB ds-identify.)
func dscheckNames(s string) iter.Seq[string] {
	const prefix = "dscheck_"
	return func(yield func(string) bool) {
		for i := 0; ; {
			j := strings.Index(s[i:], prefix)
			if j < 0 {
				return
			}
			at := i + j
			i = at + len(prefix)
			if at > 0 && s[at-1] != '\n' {
				continue
			}
			k := i
			for k < len(s) && (s[k] >= 'A' && s[k] <= 'Z' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= '0' && s[k] <= '9' || s[k] == '_') {
				k++
			}
			if k > i && strings.HasPrefix(s[k:], "() {") && !yield(s[i:k]) {
				return
			}
		}
	}
}

// unblank is s without its blanks and tabs: the markers' match that
// survives a reformatting of the script.
func unblank(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
}

// shDefault returns the value of the one top-level NAME="..." assignment
// of a script, as the shell expands it: a backslash before a newline
// joins the lines, before $ ` " or \ quotes it, and ${DI_ENABLED} and
// ${DI_DISABLED} are their values. "" when there is no such assignment,
// more than one, or it expands anything else.
func shDefault(s, name string) string {
	val, n := "", 0
	for rest := s; ; {
		i := strings.Index(rest, "\n"+name+`="`)
		if i < 0 {
			break
		}
		rest = rest[i+len(name)+3:]
		n++
		var b strings.Builder
		closed := false
	scan:
		for j := 0; j < len(rest) && j < maxPath; j++ {
			switch c := rest[j]; c {
			case '"':
				closed = true
				break scan
			case '\\':
				if j+1 < len(rest) {
					j++
					switch rest[j] {
					case '\n':
					case '$', '`', '"', '\\':
						b.WriteByte(rest[j])
					default:
						b.WriteByte('\\')
						b.WriteByte(rest[j])
					}
				}
			case '$':
				v, ok := "", false
				for ref, x := range map[string]string{"${DI_ENABLED}": "enabled", "${DI_DISABLED}": "disabled"} {
					if strings.HasPrefix(rest[j:], ref) {
						v, ok = x, true
						j += len(ref) - 1
					}
				}
				if !ok {
					return ""
				}
				b.WriteString(v)
			case '`':
				return ""
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return ""
		}
		val = b.String()
	}
	if n != 1 {
		return ""
	}
	return val
}

// diPolicy is a parsed policy (parse_policy's _rc_ variables).
type diPolicy struct{ mode, found, maybe, notfound string }

// parsePolicy is parse_policy: the words of policy between commas over
// the defaults def; a found=, maybe= or notfound= value it does not know
// takes the default's.
func parsePolicy(policy string, def diPolicy) diPolicy {
	var p diPolicy
	for _, tok := range strings.Split(policy, ",") {
		_, val, _ := strings.Cut(tok, "=")
		if !strings.Contains(tok, "=") {
			val = tok
		}
		switch {
		case tok == "enabled" || tok == "disabled" || tok == "search" || tok == "report":
			p.mode = tok
		case tok == "found=all" || tok == "found=first":
			p.found = val
		case tok == "maybe=all" || tok == "maybe=none":
			p.maybe = val
		case tok == "notfound=enabled" || tok == "notfound=disabled":
			p.notfound = val
		case strings.HasPrefix(tok, "found="):
			p.found = def.found
		case strings.HasPrefix(tok, "maybe="):
			p.maybe = def.maybe
		case strings.HasPrefix(tok, "notfound="):
			p.notfound = def.notfound
		}
	}
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return diPolicy{or(p.mode, def.mode), or(p.found, def.found), or(p.maybe, def.maybe), or(p.notfound, def.notfound)}
}

// main is ds-identify's main and _main for a boot with the kernel
// command line cmdline (as read) on the machine m: its exit code, the
// note of what the model assumed when the machine decided, and false
// when the port cannot tell (the machine's architecture unknown where it
// matters).
func (di dsIdentify) main(fsys *rootfs.FS, cmdline string, m Machine) (rc int, note string, ok bool) {
	// is_disabled (25.x) reads /etc/cloud/cloud-init.disabled itself.
	if di.isDisabled && (isRegular(fsys, "etc/cloud/cloud-init.disabled") || strings.Contains(cmdline, "cloud-init=disabled")) {
		return diOff, "", true
	}
	// read_config: ds-identify.cfg, then the command line.
	dsname, policy := "", ""
	if isRegular(fsys, "etc/cloud/ds-identify.cfg") {
		data, _ := readScript(fsys, "etc/cloud/ds-identify.cfg")
		dsname, policy = di.readConfig(data)
	}
	for _, tok := range ifsFields(cmdline) {
		key, val, found := strings.Cut(tok, "=")
		if !found {
			val = tok
		}
		if di.semicolon {
			val, _, _ = strings.Cut(val, ";")
		}
		switch {
		case key == "ci.ds" || key == "ci.datasource" || (key == "ds" && di.dsKey):
			dsname = val
		case key == "ci.di.policy":
			policy = val
		}
	}
	cfg, ok := readConfigFiles(fsys)
	if !ok {
		return 0, "", false
	}
	// parse_policy: the default by uname -m. Unknown, both must agree.
	arch := m.Architecture
	if arch == "" {
		arch = condition.ImageArchitecture(fsys)
	}
	switch arch {
	case "x86", "x86-64", "x86_64", "amd64", "i386", "i486", "i586", "i686":
		rc, note = di.search(fsys, cfg, cmdline, dsname, policy, di.policy, m)
	case "":
		rc, note = di.search(fsys, cfg, cmdline, dsname, policy, di.policy, m)
		if rc2, _ := di.search(fsys, cfg, cmdline, dsname, policy, di.policyNoDMI, m); rc2 != rc {
			return 0, "", false
		}
	default:
		rc, note = di.search(fsys, cfg, cmdline, dsname, policy, di.policyNoDMI, m)
	}
	return rc, note, true
}

// search is the rest of _main under the default policy def: the mode,
// the datasource named, the single entry, then the checks of the list.
func (di dsIdentify) search(fsys *rootfs.FS, cfg []cfgFile, cmdline, dsname, policy, def string, m Machine) (rc int, note string) {
	p := parsePolicy(policy, parsePolicy(def, diPolicy{}))
	switch p.mode {
	case "disabled":
		return diDisabled, ""
	case "enabled":
		return diFound, ""
	}
	if dsname != "" {
		return diFound, ""
	}
	if isRegular(fsys, "var/lib/cloud/instance/manual-clean") {
		return diFound, "" // manual_clean_and_existing
	}
	list := ifsFields(di.readDatasourceList(cfg, cmdline))
	if len(list) == 1 || len(list) == 2 && list[1] == "None" {
		return diFound, "" // single entry in datasource_list
	}
	onMachine := ""
	for _, ds := range list {
		if !di.checks[ds] {
			continue // no check method
		}
		if di.imageFinds(fsys, cfg, cmdline, ds) {
			return diFound, ""
		}
		if onMachine == "" && machineOffers(fsys, m.Datasource, ds) {
			onMachine = ds
		}
	}
	if onMachine != "" {
		if m.Datasource == "" {
			return diFound, "assumed: cloud-init's ds-identify finds on the machine a datasource of the image's datasource_list, as on the cloud the image is built for (--assume datasource=NAME, or none, states the machine's)"
		}
		return diFound, "cloud-init's ds-identify finds datasource " + onMachine + " (--assume datasource=" + m.Datasource + ")"
	}
	// Nothing found: a maybe only comes from the machine's side, which
	// finds what it offers.
	switch p.mode + ":" + p.notfound {
	case "report:disabled", "report:enabled", "search:enabled":
		return diFound, ""
	case "search:disabled":
		return diDisabled, ""
	}
	return diError, ""
}

// machineOffers is the machine's side of dscheck_DS under the
// assumption: the datasource it offers (OpenStack's metadata service is
// not looked for when the image has a config drive seed, as
// dscheck_OpenStack does), or any of the list but None by default.
func machineOffers(fsys *rootfs.FS, offered, ds string) bool {
	if ds == "None" || offered != "" && !strings.EqualFold(offered, ds) {
		return false
	}
	return ds != "OpenStack" || !configDriveV2(fsys)
}

// readConfig is _read_config of ds-identify.cfg: the last datasource: and
// policy: values.
func (di dsIdentify) readConfig(data []byte) (dsname, policy string) {
	for _, line := range shReadLines(data) {
		line, _, _ = strings.Cut(line, "#")
		key, val, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		val = shUnquote(di.trim(val))
		switch di.trim(key) {
		case "datasource":
			dsname = val
		case "policy":
			policy = val
		}
	}
	return dsname, policy
}

// trim is ds-identify's trim: 22.4 splits and joins the words (inner
// blanks collapse), 25.x removes [[:space:]] at both ends.
func (di dsIdentify) trim(s string) string {
	if di.trimEnds {
		return strings.TrimFunc(s, func(r rune) bool { return r < 0x80 && isBlank(byte(r)) })
	}
	return strings.Join(ifsFields(s), " ")
}

// shUnquote is unquote: one pair of enclosing quotes removed.
func shUnquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

// readDatasourceList is read_datasource_list (DI_DSNAME is empty here):
// the command line's cc:...datasource_list[...], else the config files'
// datasource_list, else DI_DSLIST_DEFAULT.
func (di dsIdentify) readDatasourceList(cfg []cfgFile, cmdline string) string {
	list := ""
	if i := strings.Index(cmdline, "cc:"); i >= 0 && strings.Contains(cmdline[i:], "datasource_list") {
		t := cmdline[strings.LastIndex(cmdline, "datasource_list")+len("datasource_list"):]
		t, _, _ = strings.Cut(t, "]")
		t = t[strings.LastIndex(t, "[")+1:]
		list = di.parseYAMLArray(t)
	}
	if list == "" {
		if v, ok := di.checkConfig(cfg, "datasource_list"); ok {
			if !di.flowSeq {
				list = di.parseYAMLArray(v)
			} else if v = di.trim(v[strings.LastIndexByte(v, ':')+1:]); v != "" {
				// get_single_line_flow_sequence leaves the value after
				// the last colon.
				list = di.parseYAMLArray(v)
			}
		}
	}
	if list == "" {
		list = di.dslist
	}
	return list
}

// parseYAMLArray is parse_yaml_array: one [ and ] off the ends, the
// fields between commas trimmed and unquoted, joined by blanks.
func (di dsIdentify) parseYAMLArray(v string) string {
	v = strings.TrimPrefix(v, "[")
	v = strings.TrimSuffix(v, "]")
	if v == "" {
		return ""
	}
	fields := strings.Split(v, ",")
	if fields[len(fields)-1] == "" {
		fields = fields[:len(fields)-1] // IFS splitting drops a last empty field
	}
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = shUnquote(di.trim(f))
	}
	return strings.Join(out, " ")
}

// readConfigFiles reads check_config's files: /etc/cloud/cloud.cfg and
// the glob /etc/cloud/cloud.cfg.d/*.cfg in the shell's order, those test
// -f passes (22.4 skips the others; grep fails on them); false when they
// are more than the port reads.
func readConfigFiles(fsys *rootfs.FS) ([]cfgFile, bool) {
	files := []string{"etc/cloud/cloud.cfg"}
	if ents, err := fsys.ReadDir("etc/cloud/cloud.cfg.d"); err == nil {
		var names []string
		for _, e := range ents {
			if n := e.Name(); strings.HasSuffix(n, ".cfg") && !strings.HasPrefix(n, ".") {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			files = append(files, "etc/cloud/cloud.cfg.d/"+n)
		}
	}
	if len(files) > maxConfigFiles {
		return nil, false
	}
	var out []cfgFile
	total := 0
	for _, f := range files {
		if !isRegular(fsys, f) {
			continue
		}
		data, ok := readScript(fsys, f)
		if total += len(data); !ok || total > maxConfig {
			return nil, false
		}
		out = append(out, cfgFile{"/" + f, data})
	}
	return out, true
}

// cfgFile is one of check_config's files: its path and content.
type cfgFile struct {
	path string
	data []byte
}

// checkConfig is check_config(key): the value of the last line of the
// config files that sets key, and whether one does. 22.4 reads each line
// as read does and takes "key: value" or "key:" at its start; 25.x greps
// for key["\']*[[:space:]]*: anywhere in a line (in the C locale) and
// takes what follows the first ": " of grep's FILE:LINE once cut at its
// first "#" and its file name (up to the first ":") removed; a file with
// a NUL is binary, of which grep prints no line.
func (di dsIdentify) checkConfig(cfg []cfgFile, key string) (string, bool) {
	val, found := "", false
	for _, f := range cfg {
		if !di.grepConfig {
			for _, line := range shReadLines(f.data) {
				line, _, _ = strings.Cut(line, "#")
				if strings.HasPrefix(line, key+": ") || line == key+":" {
					val, found = strings.TrimPrefix(line[len(key)+1:], " "), true
				}
			}
			continue
		}
		if bytes.IndexByte(f.data, 0) >= 0 {
			continue
		}
		for _, line := range strings.Split(string(f.data), "\n") {
			if !grepKey(line, key, di.grepQuote23) {
				continue
			}
			line, _, _ = strings.Cut(f.path+":"+line, "#")
			fn, _, _ := strings.Cut(line, ":")
			if line = strings.TrimPrefix(line, fn+":"); line == "" {
				continue
			}
			if _, after, ok := strings.Cut(line, ": "); ok {
				line = after
			}
			val, found = line, true
		}
	}
	return val, found
}

// grepKey is the match of grep "$key[\"\']*[[:space:]]*:", whose
// bracket holds ", \ and ' (24.2 on), or, quote23, of 23.4's grep
// "$key\"\?:": the key, at most one ", then the colon.
func grepKey(line, key string, quote23 bool) bool {
	for i := 0; ; {
		j := strings.Index(line[i:], key)
		if j < 0 {
			return false
		}
		k := i + j + len(key)
		if quote23 {
			if k < len(line) && line[k] == '"' {
				k++
			}
		} else {
			for k < len(line) && (line[k] == '"' || line[k] == '\'' || line[k] == '\\') {
				k++
			}
			for k < len(line) && isBlank(line[k]) {
				k++
			}
		}
		if k < len(line) && line[k] == ':' {
			return true
		}
		i += j + 1
	}
}

// imageFinds is the image's side of dscheck_DS: the seeds and
// configuration it finds in the image whatever the machine.
func (di dsIdentify) imageFinds(fsys *rootfs.FS, cfg []cfgFile, cmdline, ds string) bool {
	switch ds {
	case "NoCloud":
		if di.nocloudCmdline && strings.Contains(" "+cmdline+" ", " ds=nocloud") {
			return true
		}
		for _, d := range []string{"nocloud", "nocloud-net"} {
			if seedDir(fsys, "var/lib/cloud", d, "meta-data", "user-data") ||
				isDir(fsys, "writable/system-data") && seedDir(fsys, "writable/system-data/var/lib/cloud", d, "meta-data", "user-data") {
				return true
			}
		}
		if _, ok := di.checkConfig(cfg, "NoCloud"); !ok {
			return false
		}
		_, ud := di.checkConfig(cfg, "user-data")
		_, md := di.checkConfig(cfg, "meta-data")
		_, sf := di.checkConfig(cfg, "seedfrom")
		return ud && md || di.seedfrom && sf
	case "MAAS":
		const iqn = "iqn.2004-05.com.ubuntu:maas"
		if inOrder(cmdline, "cloud-config-url=", iqn) || inOrder(cmdline, iqn, "cloud-config-url=") {
			return true
		}
		if !di.maasConfig {
			return false
		}
		_, ok := di.checkConfig(cfg, "MAAS")
		return ok
	case "ConfigDrive":
		return configDriveV2(fsys)
	case "Ec2":
		return seedDir(fsys, "var/lib/cloud", "ec2", "meta-data", "user-data")
	case "AliYun":
		return seedDir(fsys, "var/lib/cloud", "AliYun", "meta-data", "user-data")
	case "Azure":
		return seedDir(fsys, "var/lib/cloud", "azure", "ovf-env.xml")
	case "OVF":
		return seedDir(fsys, "var/lib/cloud", "ovf", "ovf-env.xml")
	case "OpenNebula":
		return seedDir(fsys, "var/lib/cloud", "opennebula", "meta-data")
	case "Bigstep":
		return isRegular(fsys, "var/lib/cloud/data/seed/bigstep/url")
	}
	return false
}

// inOrder is the pattern *a*b*.
func inOrder(s, a, b string) bool {
	i := strings.Index(s, a)
	return i >= 0 && strings.Contains(s[i+len(a):], b)
}

// seedDir is check_seed_dir: the directory seed/NAME of vlc with every
// file given.
func seedDir(fsys *rootfs.FS, vlc, name string, files ...string) bool {
	dir := vlc + "/seed/" + name
	if !isDir(fsys, dir) {
		return false
	}
	for _, f := range files {
		if !isRegular(fsys, dir+"/"+f) {
			return false
		}
	}
	return true
}

// configDriveV2 is the image's side of check_configdrive_v2: the first
// match of openstack/2???-??-??/meta_data.json a file, in /config-drive
// or the config_drive seed, or the seed's openstack/latest/meta_data.json.
func configDriveV2(fsys *rootfs.FS) bool {
	for _, d := range []string{"config-drive", "var/lib/cloud/seed/config_drive"} {
		ents, err := fsys.ReadDir(d + "/openstack")
		if err != nil {
			continue
		}
		var names []string
		for _, e := range ents {
			if n := e.Name(); len(n) == 10 && n[0] == '2' && n[4] == '-' && n[7] == '-' {
				if _, err := fsys.Lstat(d + "/openstack/" + n + "/meta_data.json"); err == nil {
					names = append(names, n)
				}
			}
		}
		if len(names) > 0 && isRegular(fsys, d+"/openstack/"+slices.Min(names)+"/meta_data.json") {
			return true
		}
	}
	return exists(fsys, "var/lib/cloud/seed/config_drive/openstack/latest/meta_data.json")
}

// shReadLines splits data into the lines `while read line` sees: a
// backslash quotes the next byte (and joins lines before a newline),
// unquoted blanks at both ends are removed, NULs dropped, and a last line
// without a newline is never read.
func shReadLines(data []byte) []string {
	var out []string
	var cur []byte
	var quoted []bool
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case 0:
		case '\\':
			if i+1 == len(data) {
				return out
			}
			i++
			if data[i] != '\n' {
				cur, quoted = append(cur, data[i]), append(quoted, true)
			}
		case '\n':
			s, e := 0, len(cur)
			for s < e && !quoted[s] && (cur[s] == ' ' || cur[s] == '\t') {
				s++
			}
			for e > s && !quoted[e-1] && (cur[e-1] == ' ' || cur[e-1] == '\t') {
				e--
			}
			out = append(out, string(cur[s:e]))
			cur, quoted = cur[:0], quoted[:0]
		default:
			cur, quoted = append(cur, c), append(quoted, false)
		}
	}
	return out
}

// shReadFirst is `read x < /proc/cmdline`: the command line's first line
// as read reads it.
func shReadFirst(cmdline string) string {
	l := shReadLines([]byte(cmdline + "\n"))
	if len(l) == 0 {
		return ""
	}
	return l[0]
}
