// Command amilint audits machine images and running hosts for services that
// systemd will start but nobody needs. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/amilint/amilint/internal/cli"
)

func main() {
	tuneGC(os.Args[1:])
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go stopOnSignal(sigs, cancel, signalGrace, os.Stderr, os.Exit)
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// signalGrace is how long a command has to stop by itself once SIGINT or
// SIGTERM cancelled its context. Most steps stop at once; a few cannot be
// interrupted (a read of stdin or of a slow image, a policy's built-in
// call, which is given up after its own 5 s), and a signal must end the
// process all the same: timeout(1) and a kubelet send one SIGTERM.
var signalGrace = 10 * time.Second

// stopOnSignal cancels the command's context at the first signal, then
// exits with status 2 at a second signal, or when the command has not
// returned within grace. Exiting there is as safe as a SIGKILL, which every
// command stands: a scan writes nothing, and fix swaps in its changes
// whole or not at all.
func stopOnSignal(sigs <-chan os.Signal, cancel func(), grace time.Duration, stderr io.Writer, exit func(int)) {
	first := <-sigs
	cancel()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case again := <-sigs:
		fmt.Fprintf(stderr, "amilint: %v again: exiting now\n", again)
	case <-t.C:
		fmt.Fprintf(stderr, "amilint: %v: still running %v later, in a step that cannot be interrupted; exiting\n", first, grace)
	}
	exit(2)
}

// gcPercent is the collector's target for the commands that run once and
// exit: one audit of the Debian root allocates about 40 MB in all, so
// collecting at every doubling of a few MB of live heap is a third of its
// CPU time for nothing (measured: scan of the Debian root 66 → 46 cpu-ms,
// peak RSS 39 → 47 MB). It is a ratio, so memory stays bounded by the
// live heap on images of any size.
const gcPercent = 1000

// tuneGC sets gcPercent unless the user set GOGC or GOMEMLIMIT, or the
// command is live, which may run for days as an exporter.
func tuneGC(args []string) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || len(args) > 0 && args[0] == "live" {
		return
	}
	debug.SetGCPercent(gcPercent)
}
