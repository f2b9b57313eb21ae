//go:build !amilint_guest

package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/userfile"
	"github.com/amilint/amilint/internal/report"
)

// runReport aggregates amilint/v1 JSON reports into one rollout report:
// `amilint report [-o json|markdown|html] [--fail-on SEV] FILE...`.
// It exits 1 when a target has an unwaived finding at or above --fail-on,
// 2 when a file cannot be read or is not an amilint/v1 report.
func runReport(e *env, args []string) int {
	fs := newFlags(e, "report")
	out := fs.String("o", "markdown", "output format: "+strings.Join(report.RolloutFormats, ", "))
	failOn := fs.String("fail-on", "high", "a target fails when it has a finding at or above this severity")
	files, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint report [-o FORMAT] [--fail-on SEVERITY] FILE...")
	}
	if err != nil {
		return fail(e, "report", err)
	}
	sev, err := finding.ParseSeverity(*failOn)
	if err != nil {
		return fail(e, "report", err)
	}
	w, err := report.GetRollout(*out)
	if err != nil {
		return fail(e, "report", err)
	}
	if len(files) == 0 {
		return fail(e, "report", fmt.Errorf("no report files given (usage: amilint report [-o FORMAT] FILE...)"))
	}
	r, err := aggregateFiles(files, sev)
	if err != nil {
		return fail(e, "report", err)
	}
	bw := bufio.NewWriter(e.stdout)
	if err := w.Write(bw, r); err != nil {
		return fail(e, "report", err)
	}
	if err := bw.Flush(); err != nil {
		return fail(e, "report", fmt.Errorf("write report: %w", err))
	}
	if r.Summary.Failing > 0 {
		return ExitFindings
	}
	return ExitOK
}

// aggregateFiles reads and decodes the files on every core and folds them
// into the aggregator in argument order, holding at most a small window of
// decoded reports. The first unreadable or corrupt file (in argument
// order) is the error, naming the file.
func aggregateFiles(files []string, failOn finding.Severity) (*report.Rollout, error) {
	type result struct {
		r   *finding.Report
		err error
	}
	workers := min(runtime.GOMAXPROCS(0), len(files))
	slots := make([]chan result, len(files))
	for i := range slots {
		slots[i] = make(chan result, 1)
	}
	window := make(chan struct{}, 4*workers)
	jobs := make(chan int)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				b, err := userfile.Read(files[i])
				if err != nil {
					slots[i] <- result{err: fmt.Errorf("%s: %w", files[i], err)}
					continue
				}
				r, err := finding.Decode(b)
				if err != nil {
					err = fmt.Errorf("%s: %w", files[i], err)
				}
				slots[i] <- result{r: r, err: err}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range files {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case jobs <- i:
			case <-stop:
				return
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	a := report.NewAggregator(failOn)
	for i := range files {
		res := <-slots[i]
		<-window
		if res.err != nil {
			return nil, res.err
		}
		a.Add(files[i], res.r)
	}
	return a.Rollout(), nil
}
