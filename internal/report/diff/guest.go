//go:build amilint_guest

package diff

import (
	"errors"

	"github.com/amilint/amilint/internal/audit/finding"
)

// htmlFormat refuses HTML in the guest build of amilint, which has no HTML
// code (and refuses `amilint diff` itself).
func htmlFormat(finding.Severity) (Writer, error) {
	return nil, errors.New("diff format \"html\": not written by the guest build of amilint; use the full amilint")
}
