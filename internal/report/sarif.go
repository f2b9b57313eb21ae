package report

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// SARIF constants: the version and the schema URI that GitHub code scanning
// and the SARIF validators recognise.
const (
	SARIFVersion = "2.1.0"
	SARIFSchema  = "https://json.schemastore.org/sarif-2.1.0.json"
	// SARIFRootBase is the uriBaseId that artifact locations are relative
	// to: the root of the audited image.
	SARIFRootBase = "ROOTPATH"
)

// sarifWriter writes a SARIF 2.1.0 log with one run.
type sarifWriter struct{ o options }

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool              sarifTool        `json:"tool"`
	Results           []sarifResult    `json:"results"`
	AutomationDetails *sarifAutomation `json:"automationDetails,omitempty"`
	Properties        map[string]any   `json:"properties,omitempty"`
}

type sarifAutomation struct {
	ID string `json:"id"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	Version        string      `json:"version,omitempty"`
	InformationURI string      `json:"informationUri,omitempty"`
	Rules          []sarifRule `json:"rules"`
}

type sarifText struct {
	Text     string `json:"text"`
	Markdown string `json:"markdown,omitempty"`
}

type sarifRule struct {
	ID                   string         `json:"id"`
	Name                 string         `json:"name,omitempty"`
	ShortDescription     sarifText      `json:"shortDescription"`
	FullDescription      sarifText      `json:"fullDescription"`
	Help                 sarifText      `json:"help"`
	HelpURI              string         `json:"helpUri,omitempty"`
	DefaultConfiguration sarifRuleConf  `json:"defaultConfiguration"`
	Properties           map[string]any `json:"properties"`
}

type sarifRuleConf struct {
	Level string `json:"level"`
}

type sarifResult struct {
	RuleID              string             `json:"ruleId"`
	RuleIndex           int                `json:"ruleIndex"`
	Level               string             `json:"level"`
	Message             sarifText          `json:"message"`
	Locations           []sarifLocation    `json:"locations"`
	PartialFingerprints map[string]string  `json:"partialFingerprints,omitempty"`
	Suppressions        []sarifSuppression `json:"suppressions,omitempty"`
	Properties          map[string]any     `json:"properties,omitempty"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifactLoc `json:"artifactLocation"`
	Region           sarifRegion      `json:"region"`
}

type sarifArtifactLoc struct {
	URI       string `json:"uri"`
	URIBaseID string `json:"uriBaseId,omitempty"`
}

type sarifRegion struct {
	StartLine int `json:"startLine"`
}

type sarifSuppression struct {
	Kind          string `json:"kind"`
	Status        string `json:"status,omitempty"`
	Justification string `json:"justification,omitempty"`
}

// SARIFLevel maps a severity to a SARIF result level: error for high and
// critical, warning for medium, note below.
func SARIFLevel(s finding.Severity) string {
	switch {
	case s >= finding.High:
		return "error"
	case s == finding.Medium:
		return "warning"
	}
	return "note"
}

// SecuritySeverity is the CVSS-like score GitHub code scanning reads from
// a rule's "security-severity" property to rank alerts (critical above 9.0,
// high 7.0–8.9, medium 4.0–6.9, low below).
func SecuritySeverity(s finding.Severity) string {
	switch s {
	case finding.Critical:
		return "9.5"
	case finding.High:
		return "8.0"
	case finding.Medium:
		return "5.5"
	case finding.Low:
		return "3.0"
	}
	return "0.0"
}

// ArtifactURI is where a finding points inside the image, relative to its
// root: the unit's fragment path (evidence "fragment" or "path"), else the
// file declaring the last edge of its chain (the .wants link), else
// etc/systemd/system/UNIT, where disable and mask write.
func ArtifactURI(f finding.Finding) string {
	for _, k := range []string{"fragment", "fragment_path", "path"} {
		if s, ok := f.Evidence[k].(string); ok && s != "" {
			return rootRelative(s)
		}
	}
	if src := ChainSources(f.Chain); len(src) > 0 {
		return rootRelative(src[len(src)-1])
	}
	if f.Unit != "" {
		return rootRelative("etc/systemd/system/" + f.Unit)
	}
	return "etc/systemd/system"
}

// rootRelative cleans an image path and makes it a relative URI reference.
func rootRelative(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	// A colon in the first segment would read as a scheme, making the
	// reference absolute (RFC 3986 section 4.2).
	segs[0] = strings.ReplaceAll(segs[0], ":", "%3A")
	return strings.Join(segs, "/")
}

func (s *sarifWriter) Write(w io.Writer, r *finding.Report) error {
	fs := sortedFindings(r)
	ruleIndex := map[string]int{}
	var rules []sarifRule
	for _, f := range fs {
		// Findings come worst first, so a rule's first finding gives
		// its default level and score.
		if _, ok := ruleIndex[f.RuleID]; ok {
			continue
		}
		ruleIndex[f.RuleID] = len(rules)
		rules = append(rules, s.rule(f))
	}
	results := make([]sarifResult, 0, len(fs))
	for _, f := range fs {
		msg := oneLine(f.Message)
		if c := Chain(f.Chain); c != "" {
			msg += " Starts at boot: " + c + "."
		}
		if cmds := FixCommands(f); len(cmds) > 0 {
			msg += " Fix: " + strings.Join(cmds, "; ") + "."
		}
		res := sarifResult{
			RuleID:    f.RuleID,
			RuleIndex: ruleIndex[f.RuleID],
			Level:     SARIFLevel(f.Severity),
			Message:   sarifText{Text: msg},
			Locations: []sarifLocation{{PhysicalLocation: sarifPhysical{
				ArtifactLocation: sarifArtifactLoc{URI: ArtifactURI(f), URIBaseID: SARIFRootBase},
				Region:           sarifRegion{StartLine: 1},
			}}},
			PartialFingerprints: map[string]string{
				"amilint/v1": r.Target.Name + "|" + f.RuleID + "|" + f.Unit,
			},
			Properties: map[string]any{"severity": f.Severity.String()},
		}
		if f.Unit != "" {
			res.Properties["unit"] = f.Unit
		}
		if len(f.Chain) > 0 {
			res.Properties["chain"] = ChainUnits(f.Chain)
		}
		if f.Waived {
			j := "waived"
			if f.Waiver != nil {
				j = f.Waiver.Reason
				if f.Waiver.Expires != "" {
					j += " (expires " + f.Waiver.Expires + ")"
				}
			}
			res.Suppressions = []sarifSuppression{{Kind: "external", Status: "accepted", Justification: j}}
		}
		results = append(results, res)
	}
	if rules == nil {
		rules = []sarifRule{}
	}
	log := sarifLog{
		Schema:  SARIFSchema,
		Version: SARIFVersion,
		Runs: []sarifRun{{
			Tool: sarifTool{Driver: sarifDriver{
				Name:           "amilint",
				Version:        s.o.version,
				InformationURI: "https://github.com/amilint/amilint",
				Rules:          rules,
			}},
			Results:           results,
			AutomationDetails: &sarifAutomation{ID: "amilint/" + sarifCategory(r.Target.Name) + "/"},
			Properties:        map[string]any{"target": r.Target},
		}},
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(log); err != nil {
		return fmt.Errorf("write sarif report: %w", err)
	}
	return nil
}

func (s *sarifWriter) rule(f finding.Finding) sarifRule {
	meta, known := s.o.rules[f.RuleID]
	title := meta.Title
	if title == "" {
		title = f.Title
	}
	if title == "" {
		title = f.RuleID
	}
	full := meta.Rationale
	if full == "" {
		full = title
	}
	sev := f.Severity
	if known {
		sev = meta.Severity
	}
	help, md := full, full
	if fix := remediationText(f); fix != "" {
		help += "\n\nRemediation: " + fix
		md += "\n\n**Remediation:** " + fix
	}
	if cmds := FixCommands(f); len(cmds) > 0 {
		help += "\n\n" + strings.Join(cmds, "\n")
		md += "\n\n```sh\n" + strings.Join(cmds, "\n") + "\n```"
	}
	helpURI := meta.HelpURI
	if helpURI == "" {
		for _, ref := range f.References {
			if u, err := url.Parse(ref); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
				helpURI = ref
				break
			}
		}
	}
	tags := []string{"security", "systemd"}
	if f.Remediation.Action != "" && f.Remediation.Action != "none" {
		tags = append(tags, f.Remediation.Action)
	}
	slices.Sort(tags)
	return sarifRule{
		ID:                   f.RuleID,
		Name:                 ruleName(f.RuleID),
		ShortDescription:     sarifText{Text: title},
		FullDescription:      sarifText{Text: full},
		Help:                 sarifText{Text: help, Markdown: md},
		HelpURI:              helpURI,
		DefaultConfiguration: sarifRuleConf{Level: SARIFLevel(sev)},
		Properties: map[string]any{
			"security-severity": SecuritySeverity(sev),
			"tags":              tags,
			"problem.severity":  SARIFLevel(sev),
		},
	}
}

// remediationText says how to fix a rule's findings in words.
func remediationText(f finding.Finding) string {
	if f.Remediation.Text != "" {
		return oneLine(f.Remediation.Text)
	}
	switch f.Remediation.Action {
	case "disable", "mask":
		return f.Remediation.Action + " the unit (amilint fix applies it offline)."
	}
	return ""
}

// ruleName makes a rule id a PascalCase name ("ecs-agent-unused" →
// "EcsAgentUnused"), as SARIF viewers show rule names.
func ruleName(id string) string {
	var b strings.Builder
	up := true
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			if up && r >= 'a' && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			up = false
		default:
			up = true
		}
	}
	return b.String()
}

// sarifCategory makes a target name usable in automationDetails.id, which
// GitHub uses to tell analyses of different targets apart.
func sarifCategory(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "target"
	}
	return b.String()
}
