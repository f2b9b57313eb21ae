package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// junitWriter writes JUnit XML, the format CI systems show as test results:
// one testsuite per report, one testcase per rule and unit. An unwaived
// finding at or above the fail-on severity is a failure, a waived one is
// skipped, anything else passes with the finding in system-out.
type junitWriter struct{ o options }

// JUnitSuites is the JUnit XML document; exported so tests and tools can
// parse it back with encoding/xml.
type JUnitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []JUnitSuite `xml:"testsuite"`
}

// JUnitSuite is one audited target.
type JUnitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Properties []JUnitProperty `xml:"properties>property,omitempty"`
	Cases      []JUnitCase     `xml:"testcase"`
}

// JUnitProperty is a name/value pair of a suite.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitCase is one rule × unit.
type JUnitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *JUnitFailure `xml:"failure,omitempty"`
	Skipped   *JUnitSkipped `xml:"skipped,omitempty"`
	SystemOut *JUnitOutput  `xml:"system-out,omitempty"`
}

// JUnitOutput is a case's captured output.
type JUnitOutput struct {
	Text string `xml:",cdata"`
}

// JUnitFailure marks a failing case.
type JUnitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

// JUnitSkipped marks a waived case.
type JUnitSkipped struct {
	Message string `xml:"message,attr"`
}

func (j *junitWriter) Write(w io.Writer, r *finding.Report) error {
	suite := JUnitSuite{
		Name: "amilint: " + r.Target.Name,
		Properties: []JUnitProperty{
			{Name: "target", Value: r.Target.Name},
			{Name: "kind", Value: r.Target.Kind},
			{Name: "fail-on", Value: j.o.failOn.String()},
		},
	}
	if j.o.version != "" {
		suite.Properties = append(suite.Properties, JUnitProperty{Name: "amilint.version", Value: j.o.version})
	}
	for _, f := range sortedFindings(r) {
		name := f.RuleID
		if f.Unit != "" {
			name += " " + f.Unit
		}
		c := JUnitCase{Name: name, Classname: "amilint." + f.RuleID}
		body := junitBody(f)
		switch {
		case f.Waived:
			reason := "waived"
			if f.Waiver != nil {
				reason = "waived: " + f.Waiver.Reason
				if f.Waiver.Expires != "" {
					reason += " (expires " + f.Waiver.Expires + ")"
				}
			}
			c.Skipped = &JUnitSkipped{Message: reason}
			c.SystemOut = &JUnitOutput{Text: body}
			suite.Skipped++
		case f.Severity >= j.o.failOn:
			c.Failure = &JUnitFailure{Message: oneLine(f.Message), Type: f.Severity.String(), Text: body}
			suite.Failures++
		default:
			c.SystemOut = &JUnitOutput{Text: body}
		}
		suite.Cases = append(suite.Cases, c)
		suite.Tests++
	}
	doc := JUnitSuites{Name: "amilint", Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped,
		Suites: []JUnitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	return nil
}

func junitBody(f finding.Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "severity: %s\n%s\n", f.Severity, oneLine(f.Message))
	if c := Chain(f.Chain); c != "" {
		fmt.Fprintf(&b, "starts at boot: %s\n", c)
	}
	for _, cmd := range FixCommands(f) {
		fmt.Fprintf(&b, "fix: %s\n", cmd)
	}
	return xmlSafe(b.String())
}

// xmlSafe replaces the runes XML 1.0 cannot hold, which a hostile image's
// unit names or messages may carry, so the document always parses.
func xmlSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
			return r
		}
		return '\uFFFD'
	}, s)
}
