package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTuneGC(t *testing.T) {
	for _, c := range []struct {
		args    []string
		gogc    string
		percent int
	}{
		{args: []string{"scan", "DIR"}, percent: gcPercent},
		{args: nil, percent: gcPercent},
		{args: []string{"live"}, percent: 100},
		{args: []string{"scan"}, gogc: "50", percent: 100},
	} {
		t.Setenv("GOGC", c.gogc)
		t.Setenv("GOMEMLIMIT", "")
		debug.SetGCPercent(100)
		tuneGC(c.args)
		assert.Equal(t, c.percent, debug.SetGCPercent(100), "%v GOGC=%q", c.args, c.gogc)
	}
}

// TestMain runs main itself when a test starts this binary as amilint
// (AMILINT_TEST_MAIN=1), with AMILINT_TEST_GRACE as signalGrace.
func TestMain(m *testing.M) {
	if os.Getenv("AMILINT_TEST_MAIN") == "1" {
		if g := os.Getenv("AMILINT_TEST_GRACE"); g != "" {
			d, err := time.ParseDuration(g)
			if err != nil {
				panic(err)
			}
			signalGrace = d
		}
		main()
	}
	os.Exit(m.Run())
}

// startBlocked starts amilint scan - as a real process reading a stdin
// nobody writes (a read no context interrupts), and returns once one of
// its threads is in that read: main set up its signal handling before, so
// a signal sent then is amilint's to handle. (The runtime catches every
// signal from the start, so /proc's SigCgt says nothing of that.)
func startBlocked(t *testing.T, grace time.Duration) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "scan", "-")
	cmd.Env = append(os.Environ(), "AMILINT_TEST_MAIN=1", "AMILINT_TEST_GRACE="+grace.String())
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	cmd.Stdin = r
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	r.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	readingStdin := fmt.Sprintf("%d 0x0 ", syscall.SYS_READ)
	require.Eventually(t, func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", cmd.Process.Pid))
		for _, task := range tasks {
			if b, err := os.ReadFile(task); err == nil && strings.HasPrefix(string(b), readingStdin) {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "amilint reads its stdin")
	return cmd, &stderr, done
}

// exitCode waits for the process (at most a minute: a process that
// ignores the signal fails the test rather than hanging it).
func exitCode(t *testing.T, done <-chan error) int {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err == nil {
			return 0
		}
		require.ErrorAs(t, err, &ee)
		require.True(t, ee.Exited(), "killed by a signal: %v", err)
		return ee.ExitCode()
	case <-time.After(time.Minute):
		t.Fatal("amilint did not exit a minute after the signal")
		return -1
	}
}

func TestSignalEndsAStepThatIgnoresIt(t *testing.T) {
	cmd, stderr, done := startBlocked(t, time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 2, exitCode(t, done))
	assert.Contains(t, stderr.String(), "amilint: terminated: still running 1s later, in a step that cannot be interrupted; exiting")
}

func TestSecondSignalExitsNow(t *testing.T) {
	// A grace longer than the test's own wait: only the second
	// signal can end the process in time.
	cmd, stderr, done := startBlocked(t, time.Hour)
	// Signals sent before the first is taken are one signal (they do not
	// queue): press Ctrl-C until it exits, as a user would.
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	code := exitCode(t, done)
	close(stop)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "amilint: interrupt again: exiting now")
}

func TestStopOnSignalCancelsFirst(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	cancelled := make(chan struct{})
	exited := make(chan int, 1)
	var stderr bytes.Buffer
	go stopOnSignal(sigs, func() { close(cancelled) }, time.Hour, &stderr, func(code int) { exited <- code })
	sigs <- syscall.SIGTERM
	<-cancelled
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) at the first signal, before its grace", code)
	case <-time.After(100 * time.Millisecond):
	}
	sigs <- syscall.SIGTERM
	assert.Equal(t, 2, <-exited)
	assert.Equal(t, "amilint: terminated again: exiting now\n", stderr.String())
}
