package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// killUnits is how many units the kill test's image enables; a fix of
// them disables half and masks the other half.
const killUnits = 1000

// hostilePolicy rejects every hostile-NNNN unit started at boot: even
// ones are disabled, odd ones masked.
const hostilePolicy = `package amilint.rules.hostile

findings contains f if {
	some name, u in input.units
	startswith(name, "hostile-")
	u.starts_at_boot
	n := to_number(substring(name, 8, 4))
	action := ["disable", "mask"][n % 2]
	f := {"rule_id": "hostile", "severity": "high", "unit": name, "message": "hostile unit",
		"remediation": {"action": action, "units": [name]}}
}
`

// killImage is the dlami fixture with killUnits more units enabled.
func killImage(t *testing.T) string {
	t.Helper()
	dir := materialize(t, "dlami")
	lib := filepath.Join(dir, "usr/lib/systemd/system")
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.MkdirAll(wants, 0o755))
	for i := range killUnits {
		name := fmt.Sprintf("hostile-%04d.service", i)
		require.NoError(t, os.WriteFile(filepath.Join(lib, name), []byte("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"), 0o644))
		require.NoError(t, os.Symlink("/usr/lib/systemd/system/"+name, filepath.Join(wants, name)))
	}
	return dir
}

// fullState describes every entry below dir: type, mode, link target or
// content digest.
func fullState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "link " + tgt
		case fi.IsDir():
			m[rel] = "dir " + fi.Mode().String()
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = fmt.Sprintf("file %s %x", fi.Mode(), sha256.Sum256(b))
		}
		return nil
	}))
	return m
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// fixLeftovers lists what a fix may leave anywhere in the image.
func fixLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".#amilint-fix.") {
			out = append(out, p)
		}
		return nil
	}))
	return out
}

// runFixProcess starts `amilint fix dir` as a real process and kills it
// with SIGKILL delay after it prints its plan ("applying N changes"), or
// lets it finish when delay is negative. It returns whether the process
// was killed before it ended, and, when it ran to its end, the time from
// the plan line to the end (0 without a plan line: nothing to change).
func runFixProcess(t *testing.T, dir, policy string, delay time.Duration) (killed bool, tail time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := amilintCommand(ctx, t, "fix", dir, "--policy", policy)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	planned := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "applying ") {
				planned <- time.Now()
			}
		}
		done <- cmd.Wait()
	}()
	if delay < 0 {
		err := <-done
		code := cmd.ProcessState.ExitCode()
		require.Equal(t, ExitOK, code, "fix: %v; stderr: %s", err, stderr.String())
		select {
		case at := <-planned:
			return false, time.Since(at)
		default:
			return false, 0
		}
	}
	select {
	case <-planned:
	case err := <-done:
		t.Fatalf("fix ended before printing its plan: %v; stderr: %s", err, stderr.String())
	}
	select {
	case <-time.After(delay):
		_ = cmd.Process.Kill()
		<-done
		return cmd.ProcessState.ExitCode() == -1, 0
	case <-done:
		return false, 0
	}
}

// TestFixSurvivesSIGKILL kills real `amilint fix` runs with SIGKILL at
// random moments of their writing on an image with 1000 more units to
// disable or mask: after each kill, /etc/systemd/system is exactly as
// before or exactly as the complete fix leaves it, and the next fix
// removes what the killed one left and ends with the complete fix's tree.
// AMILINT_KILL_RUNS raises the number of kills (default 12).
func TestFixSurvivesSIGKILL(t *testing.T) {
	testenv.Slow(t, "kills real processes")
	runs := 12
	if v := os.Getenv("AMILINT_KILL_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		runs = n
	}
	policy := policyDir(t, "hostile.rego", hostilePolicy)
	template := killImage(t)
	etc := func(dir string) string { return filepath.Join(dir, "etc/systemd/system") }
	before := fullState(t, etc(template))

	// The complete fix, and how long it writes and re-audits after
	// printing its plan: the window the kills are spread over.
	ref := filepath.Join(t.TempDir(), "ref")
	require.NoError(t, os.CopyFS(ref, os.DirFS(template)))
	_, window := runFixProcess(t, ref, policy, -1)
	after := fullState(t, etc(ref))
	require.NotEqual(t, before, after)
	changed := 0
	for k, v := range after {
		if before[k] != v {
			changed++
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			changed++
		}
	}
	require.GreaterOrEqual(t, changed, killUnits, "the fix changes every hostile unit")
	assert.Empty(t, fixLeftovers(t, ref))

	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 19))
	outcome := map[string]int{}
	for i := range runs {
		dir := filepath.Join(t.TempDir(), "img")
		require.NoError(t, os.CopyFS(dir, os.DirFS(template)))
		delay := time.Duration(r.Int64N(int64(window)))
		killed, _ := runFixProcess(t, dir, policy, delay)
		got := fullState(t, etc(dir))
		state := "mixed"
		switch {
		case sameState(got, before):
			state = "before"
		case sameState(got, after):
			state = "after"
		}
		if !killed {
			state += " (not killed: it had ended)"
		}
		outcome[state]++
		require.NotContains(t, state, "mixed", "kill %d at %s after the plan left a mixed /etc/systemd/system", i, delay)

		_, _ = runFixProcess(t, dir, policy, -1)
		assert.Empty(t, fixLeftovers(t, dir), "the next fix removes what kill %d left", i)
		assert.True(t, sameState(fullState(t, etc(dir)), after), "the next fix completes the tree after kill %d", i)
	}
	t.Logf("%d kills over %s after the plan: %v", runs, window, outcome)
}
