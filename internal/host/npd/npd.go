// Package npd owns amilint's node-problem-detector custom-plugin mode: it
// turns one live audit into the plugin protocol's exit status (0 OK,
// 1 problem, 2 unknown) and its one-line message. It does no I/O.
package npd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// Plugin exit statuses, as node-problem-detector's custom plugin monitor
// reads them.
const (
	OK      = 0
	Problem = 1
	Unknown = 2
)

// MaxMessage is node-problem-detector's default max_output_length.
const MaxMessage = 80

// Status returns the plugin status and message for the findings of one
// audit at or above failOn; err is the audit's failure, if any (Unknown).
// The message names the worst finding first and counts the others, cut to
// max bytes (MaxMessage when max <= 0).
func Status(fs []finding.Finding, err error, failOn finding.Severity, max int) (int, string) {
	if max <= 0 {
		max = MaxMessage
	}
	if err != nil {
		return Unknown, cut("amilint: "+oneLine(err.Error()), max)
	}
	var hit []finding.Finding
	for _, f := range fs {
		if !f.Waived && f.Severity >= failOn {
			hit = append(hit, f)
		}
	}
	if len(hit) == 0 {
		return OK, "amilint: no live problem"
	}
	slices.SortStableFunc(hit, func(a, b finding.Finding) int { return int(b.Severity) - int(a.Severity) })
	msg := oneLine(short(hit[0]))
	if len(hit) > 1 {
		more := fmt.Sprintf(" (+%d more)", len(hit)-1)
		return Problem, cut(msg, max-len(more)) + more
	}
	return Problem, cut(msg, max)
}

// short is the finding's message as short as it can say it: the unit, or
// the message's first clause.
func short(f finding.Finding) string {
	head, _, _ := strings.Cut(f.Message, ":")
	if f.Unit != "" && !strings.Contains(head, f.Unit) {
		return f.RuleID + " " + f.Unit + ": " + head
	}
	return f.RuleID + ": " + head
}

// oneLine folds line breaks and makes the rest printable
// (finding.Printable): a message may quote a cgroup path a user named, and
// the node condition is read at terminals.
func oneLine(s string) string {
	return finding.Printable(strings.Join(strings.Fields(s), " "))
}

// cut shortens s to at most n bytes, ending with "…" when cut, without
// splitting a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	if n <= len(ell) {
		return s[:0]
	}
	i := n - len(ell)
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + ell
}
