package report

import (
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/audit/finding"
)

// jsonWriter writes the amilint/v1 document, indented, with a trailing
// newline. Field order is the struct order of package finding, so the
// output is stable for the same report.
type jsonWriter struct{ o options }

// liveDocument is the amilint/v1 report with the optional "live" field.
type liveDocument struct {
	*finding.Report
	Live *Live `json:"live,omitempty"`
}

func (j *jsonWriter) Write(w io.Writer, r *finding.Report) error {
	var v any = r
	if j.o.live != nil {
		v = liveDocument{Report: r, Live: j.o.live}
	}
	if err := WriteJSON(w, v, false); err != nil {
		return fmt.Errorf("write json report: %w", err)
	}
	return nil
}
