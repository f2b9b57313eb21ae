package unit

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	o := func(s, k, v string) *Option { return &Option{Section: s, Name: k, Value: v} }
	tests := []struct {
		name string
		in   string
		want []*Option
		err  error
	}{
		{"plain", "[Unit]\nDescription=x\nWants=a.service b.service\n",
			[]*Option{o("Unit", "Description", "x"), o("Unit", "Wants", "a.service b.service")}, nil},
		{"trims around =", "[Unit]\n  Wants =  a.service  \n", []*Option{o("Unit", "Wants", "a.service")}, nil},
		{"continuation", "[Unit]\nWants=a.service \\\n b.service\n", []*Option{o("Unit", "Wants", "a.service   b.service")}, nil},
		{"comment inside continuation skipped", "[Unit]\nWants=a.service \\\n# no\n b.service\n",
			[]*Option{o("Unit", "Wants", "a.service   b.service")}, nil},
		{"continuation at EOF", "[Unit]\nWants=a.service \\", []*Option{o("Unit", "Wants", "a.service")}, nil},
		{"escaped backslash is no continuation", "[Unit]\nX=a\\\\\nY=b\n", []*Option{o("Unit", "X", "a\\\\"), o("Unit", "Y", "b")}, nil},
		{"missing = ignored", "[Unit]\ngarbage\nWants=a.service\n", []*Option{o("Unit", "Wants", "a.service")}, nil},
		{"missing key ignored", "[Unit]\n=x\n", nil, nil},
		{"outside section ignored", "Wants=a.service\n[Unit]\nX=1\n", []*Option{o("Unit", "X", "1")}, nil},
		{"comments", "# c\n; c\n[Unit]\n  # c\nX=1\n", []*Option{o("Unit", "X", "1")}, nil},
		{"BOM", "\xef\xbb\xbf[Unit]\nX=1\n", []*Option{o("Unit", "X", "1")}, nil},
		{"CRLF", "[Unit]\r\nX=1\r\nY=2\r\n", []*Option{o("Unit", "X", "1"), o("Unit", "Y", "2")}, nil},
		{"invalid UTF-8 fails the file", "[Unit]\nW=1\nX=\xff\nY=2\n", []*Option{o("Unit", "W", "1")}, ErrInvalidUTF8},
		{"a noncharacter fails the file", "[Unit]\nX=a\uFFFEb\n", nil, ErrInvalidUTF8},
		{"so does a bad section name", "[Unit\xff]\nX=1\n", nil, ErrInvalidUTF8},
		{"empty value", "[Unit]\nWants=\n", []*Option{o("Unit", "Wants", "")}, nil},
		{"bad section header fails", "[Unit]\nX=1\n[Unit\nY=2\n", []*Option{o("Unit", "X", "1")}, ErrBadSection},
		{"unsafe section name fails", "[Un\"it]\n", nil, ErrBadSection},
		{"line too long fails", "[Unit]\nX=" + strings.Repeat("a", maxLine) + "\n", nil, ErrLineTooLong},
		{"NUL ends a line", "[Unit]\nX=1\x00Y=2\n", []*Option{o("Unit", "X", "1"), o("Unit", "Y", "2")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.in))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestParseConfigLongContinuation reads a continuation of a million
// one-byte lines, which systemd accepts (it stays under LONG_LINE_MAX).
// Scanning the whole continuation again for every line, as systemd does,
// took minutes (5*10^11 steps); the deadline is far above the
// milliseconds a linear scan needs.
func TestParseConfigLongContinuation(t *testing.T) {
	n := maxLine - 100
	in := []byte("[Unit]\nDescription=a" + strings.Repeat("\\\n", n) + "b\nX=\\\\\\\n c\n")
	type result struct {
		opts []*Option
		err  error
	}
	done := make(chan result, 1)
	go func() {
		opts, err := ParseConfig(in)
		done <- result{opts, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.Equal(t, []*Option{
			{Section: "Unit", Name: "Description", Value: "a" + strings.Repeat(" ", n) + "b"},
			{Section: "Unit", Name: "X", Value: "\\\\  c"},
		}, r.opts)
	case <-time.After(60 * time.Second):
		t.Fatal("ParseConfig still reading a continuation of 2 MB after 60 s")
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"[Unit]\nWants=a.service\n",
		"[Unit]\nX=a \\\n b\\\n",
		"\xef\xbb\xbf[Service]\r\nExecStart=/bin/x\r\n",
		"[Un\nit]\n=\n\x00\\",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opts, err := ParseConfig(data)
		for _, o := range opts {
			if o.Section == "" || o.Name == "" {
				t.Fatalf("option without section or name: %+v", o)
			}
		}
		_ = err
	})
}

func TestValidUTF8(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "/etc": true, "é€𝄞": true, "\uFFFD": true, "\uFDCF": true, "\uFDF0": true,
		"\xff": false, "\xc0\xaf": false, "\xed\xa0\x80": false, "\xf4\x90\x80\x80": false,
		"\uFDD0": false, "\uFDEF": false, "\uFFFE": false, "\uFFFF": false, "\U0001FFFE": false, "\U0010FFFF": false,
	} {
		assert.Equal(t, want, ValidUTF8(s), "%q", s)
	}
}
