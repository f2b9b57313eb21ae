package facts

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want Seconds
		err  bool
	}{
		{"10s", 10, false},
		{"10", 10, false},
		{"100ms", 0.1, false},
		{"1min 30s", 90, false},
		{"1min30s", 90, false},
		{"2h", 7200, false},
		{"1.5s", 1.5, false},
		{" 5 s ", 5, false},
		{"500us", 0.0005, false},
		{"1d 1h", 90000, false},
		{"1w", 604800, false},
		{"0", 0, false},
		{"infinity", Infinity, false},
		{"", 0, true},
		{"-1s", 0, true},
		{"10 parsecs", 0, true},
		{"1..2s", 0, true},
		{"s", 0, true},
		{"1e400", 0, true},
		{"99999999999999999999999y", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSeconds(tt.in)
			if tt.err {
				require.Error(t, err)
				assert.True(t, errors.Is(err, ErrTimeSpan))
				return
			}
			require.NoError(t, err)
			if tt.want.IsInf() {
				assert.True(t, got.IsInf())
				return
			}
			assert.InDelta(t, float64(tt.want), float64(got), 1e-9)
		})
	}
}

func TestSecondsJSON(t *testing.T) {
	b, err := Infinity.MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, `"infinity"`, string(b))
	b, err = Seconds(0.1).MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, `0.1`, string(b))
	var s Seconds
	require.NoError(t, s.UnmarshalJSON([]byte(`"infinity"`)))
	assert.True(t, s.IsInf())
	require.NoError(t, s.UnmarshalJSON([]byte(`2.5`)))
	assert.Equal(t, Seconds(2.5), s)
	require.Error(t, s.UnmarshalJSON([]byte(`"soon"`)))
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     map[string]string
		problems int
	}{
		{"plain", "ECS_CLUSTER=prod\n", map[string]string{"ECS_CLUSTER": "prod"}, 0},
		{"spaces and comments", "# comment\n; other\n\n  A = b c  \nB=\n", map[string]string{"A": "b c", "B": ""}, 0},
		{"double quotes", `A="x \"y\" \$z \n"` + "\n", map[string]string{"A": `x "y" $z \n`}, 0},
		{"single quotes", "A='a \"b\" \\c'\n", map[string]string{"A": `a "b" \c`}, 0},
		{"concatenation", `A="a"'b'c` + "\n", map[string]string{"A": "abc"}, 0},
		{"continuation", "A=one \\\ntwo\n", map[string]string{"A": "one two"}, 0},
		{"last wins", "A=1\nA=2\n", map[string]string{"A": "2"}, 0},
		{"quoted spaces kept", `A="  "` + "\n", map[string]string{"A": "  "}, 0},
		{"hash in value is literal", "A=x#y\n", map[string]string{"A": "x#y"}, 0},
		{"quotes mid value are literal", "A=a \"b c\"\n", map[string]string{"A": `a "b c"`}, 0},
		{"quoted sections join across blanks", "A=\"a\" 'b'  \n", map[string]string{"A": "ab"}, 0},
		{"no equals", "ECS_CLUSTER\nB=1", map[string]string{"B": "1"}, 1},
		{"bad name", "1A=x\nA-B=y\n", map[string]string{}, 2},
		{"unterminated double", `A="abc`, map[string]string{"A": "abc"}, 1},
		{"unterminated single", `A='abc`, map[string]string{"A": "abc"}, 1},
		{"crlf", "A=b\r\n", map[string]string{"A": "b"}, 0},
		{"comment continuation", "# a \\\nB=1\nC=2\n", map[string]string{"C": "2"}, 0},
		{"empty", "", map[string]string{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseEnv([]byte(tt.in))
			assert.Equal(t, tt.want, got.Keys)
			assert.Len(t, got.Problems, tt.problems, "%v", got.Problems)
		})
	}
}

func TestParseCommand(t *testing.T) {
	tests := []struct {
		in       string
		prefixes string
		argv     []string
		err      bool
	}{
		{"/usr/libexec/amazon-ecs-init start", "", []string{"/usr/libexec/amazon-ecs-init", "start"}, false},
		{"-/bin/true", "-", []string{"/bin/true"}, false},
		{"+@/bin/sh sh -c 'echo a b'", "+@", []string{"/bin/sh", "sh", "-c", "echo a b"}, false},
		{"!!/usr/bin/x", "!!", []string{"/usr/bin/x"}, false},
		{`/bin/echo "a \"q\"" b\ c`, "", []string{"/bin/echo", `a "q"`, "b c"}, false},
		{"/bin/a x ; /bin/b", "", []string{"/bin/a", "x"}, false},
		{"", "", nil, true},
		{"-", "", nil, true},
		{`/bin/echo "open`, "", nil, true},
		{`/bin/echo \`, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c, err := ParseCommand(tt.in)
			if tt.err {
				require.Error(t, err)
				assert.True(t, errors.Is(err, ErrCommandLine))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.prefixes, c.Prefixes)
			assert.Equal(t, tt.argv, c.Argv)
		})
	}
}

func TestSpawnsContainer(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"/usr/libexec/amazon-ecs-init start", true},
		{"/usr/libexec/amazon-ecs-init pre-start", false},
		{"/usr/bin/docker run --rm --name x img", true},
		{"/usr/bin/podman run img", true},
		{"/usr/bin/ctr -n k8s.io run img id", true},
		{"/bin/sh -c 'docker pull x && docker run x'", true},
		{"/usr/bin/docker start -a x", false},
		{"/usr/bin/dockerd -H fd://", false},
		{"/usr/bin/docker compose up", true},
		{"/bin/sh -c 'docker ps; run-parts /etc/x'", false},
		{"/usr/bin/amazon-ssm-agent", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, spawnsContainer(tt.in))
		})
	}
}

func FuzzParseSeconds(f *testing.F) {
	for _, s := range []string{"10s", "100ms", "1min 30s", "infinity", "1.5h", "", "-1", "1e9y", "5 µs", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSeconds(s)
		if err != nil {
			if !errors.Is(err, ErrTimeSpan) {
				t.Fatalf("error %v does not wrap ErrTimeSpan", err)
			}
			return
		}
		if math.IsNaN(float64(v)) || v < 0 {
			t.Fatalf("ParseSeconds(%q) = %v", s, v)
		}
		if _, err := v.MarshalJSON(); err != nil {
			t.Fatalf("marshal %v: %v", v, err)
		}
	})
}

func FuzzParseEnv(f *testing.F) {
	for _, s := range []string{"A=b\n", "A=\"x\\\"y\"\n", "A='x'y\n", "# c\\\nA=1", "A=1 \\\n2", "=x", "A=\"", "\\", "A=\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e := ParseEnv(b)
		for k := range e.Keys {
			if !validEnvName(k) {
				t.Fatalf("invalid key %q kept", k)
			}
		}
		if len(e.Problems) > 100 {
			t.Fatalf("%d problems kept", len(e.Problems))
		}
	})
}

func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"/bin/a b", "-@/bin/sh sh -c 'x y'", `"a\"b"`, "!!", "a ; b", `x\`, "'open"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommand(s)
		if err != nil {
			if !errors.Is(err, ErrCommandLine) {
				t.Fatalf("error %v does not wrap ErrCommandLine", err)
			}
			return
		}
		if len(c.Argv) == 0 {
			t.Fatalf("no words and no error for %q", s)
		}
		_ = spawnsContainer(s)
	})
}

// FuzzBuildUnit builds the facts of an arbitrary unit file: whatever the
// options say, Build returns a document that marshals, or an error.
func FuzzBuildUnit(f *testing.F) {
	for _, name := range []string{"ecs.service", "amazon-ssm-agent.service"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("[Service]\nExecStart=@%n \"x\nRestartSec=1..s\nEnvironmentFile=-rel\nEnvironmentFile=/etc/../../x\nExecSearchPath=::\n[Unit]\nStartLimitBurst=-1\n"))
	fsys := rootfs.New(fstest.MapFS{
		"usr/bin/x":      exe(),
		"etc/env":        file("A=1\n"),
		"bin":            &fstest.MapFile{Data: []byte("usr/bin"), Mode: 0o777 | 1<<27},
		"etc/loop":       &fstest.MapFile{Data: []byte("loop"), Mode: 0o777 | 1<<27},
		"etc/machine-id": file("uninitialized\n"),
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		opts, err := unit.ParseConfig(b)
		if err != nil {
			return
		}
		d, err := Build(fsys, []UnitInput{{Name: "fuzz@1.service", Options: opts, StartsAtBoot: true}}, Options{})
		if err != nil {
			return
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatalf("marshal: %v", err)
		}
	})
}

func TestExpandSpecifiers(t *testing.T) {
	got, err := expandSpecifiers("/opt/%p/%i/%N-%%n-%x%", "agent@blue.service")
	require.NoError(t, err)
	assert.Equal(t, "/opt/agent/blue/agent@blue-%n-%x%", got)

	// systemd refuses an executable longer than PATH_MAX-1 after
	// specifiers; the expansion stops there whatever the value holds.
	_, err = expandSpecifiers("/"+strings.Repeat("%n", 1<<20), "agent.service")
	assert.ErrorIs(t, err, unit.ErrExpansionTooLong)
	ok := "/" + strings.Repeat("a", unit.PathPrintfMax-1)
	got, err = expandSpecifiers(ok+"%%", "a.service")
	assert.ErrorIs(t, err, unit.ErrExpansionTooLong)
	assert.Empty(t, got)
	got, err = expandSpecifiers(ok[1:]+"%%", "a.service")
	require.NoError(t, err)
	assert.Len(t, got, unit.PathPrintfMax)
}
