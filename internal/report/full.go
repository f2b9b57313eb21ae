//go:build !amilint_guest

package report

// htmlFormat returns the HTML writer.
func htmlFormat(o options) (Writer, error) { return &htmlWriter{o}, nil }

// rolloutHTMLFormat returns the rollout's HTML writer.
func rolloutHTMLFormat() (RolloutWriter, error) { return rolloutHTML{}, nil }
