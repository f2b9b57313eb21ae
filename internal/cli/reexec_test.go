package cli

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
)

// envAsCLI makes the test binary run as amilint: tests that need a real
// process (one they can SIGKILL) run their own binary with it.
const envAsCLI = "AMILINT_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	// Reports carry the time they were made; tests compare reports of
	// separate runs, so they are all made at one fixed time
	// (TestGeneratedAt checks the clock).
	if os.Getenv("SOURCE_DATE_EPOCH") == "" {
		os.Setenv("SOURCE_DATE_EPOCH", "1764000000")
	}
	if os.Getenv(envAsCLI) == "1" {
		// As main does: a signal cancels the command.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// amilintCommand is `amilint args...` as a real process: this test binary
// acting as the CLI.
func amilintCommand(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), envAsCLI+"=1")
	return cmd
}
