package facts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

const envGenerator = "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator"

// shellUnquote undoes the quoting the generator prints values with
// (double quotes, backslash before " \ ` $).
func shellUnquote(v string) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// TestParseEnvAgainstSystemd is differential: systemd's environment.d
// generator reads files with the same parser EnvironmentFile= uses
// (parse_env_file_internal) and prints what it got. Inputs avoid what only
// environment.d does: it expands $VARS and drops empty assignments, which
// EnvironmentFile= keeps as empty values (see TestParseEnv).
func TestParseEnvAgainstSystemd(t *testing.T) {
	if _, err := os.Stat(envGenerator); err != nil {
		testenv.Missing(t, "systemd's environment.d generator is not installed (Debian package systemd)")
	}
	inputs := map[string]string{
		"plain":           "ZA=prod\n",
		"spaces":          "  ZA  =  b c  \n",
		"comments":        "# c\n; d\nZA=1\n",
		"double quotes":   `ZA="x \"y\" z"` + "\n",
		"escapes":         `ZA="a\\b\nc"` + "\n",
		"single quotes":   `ZA='lit \n "q"'` + "\n",
		"concatenation":   `ZA="a"'b'c` + "\n",
		"continuation":    "ZA=one \\\ntwo\n",
		"quoted spaces":   `ZA="  "` + "\n",
		"hash in value":   "ZA=x#y\n",
		"last wins":       "ZA=1\nZA=2\n",
		"bad names":       "1ZA=x\nZ-B=y\nZC=3\n",
		"no equals":       "ZA\nZB=1\n",
		"crlf":            "ZA=b\r\nZB=c\r\n",
		"no final nl":     "ZA=b",
		"comment cont":    "# a \\\nZB=1\nZC=2\n",
		"unquoted bslash": "ZA=a\\b\n",
		"quote mid":       "ZA=a\"b c\"d\n",
		"tab":             "ZA=\tb\t\n",
	}
	for name, text := range inputs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "environment.d", "10-amilint.conf")
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
			cmd := exec.Command(envGenerator)
			cmd.Env = []string{"XDG_CONFIG_HOME=" + dir}
			out, err := cmd.Output()
			require.NoError(t, err)
			want := map[string]string{}
			for _, line := range strings.Split(string(out), "\n") {
				k, v, ok := strings.Cut(line, "=")
				if ok && strings.HasPrefix(k, "Z") {
					want[k] = shellUnquote(v)
				}
			}
			got := map[string]string{}
			for k, v := range ParseEnv([]byte(text)).Keys {
				if strings.HasPrefix(k, "Z") {
					got[k] = v
				}
			}
			assert.Equal(t, want, got, "systemd printed:\n%s", out)
		})
	}
}
