package finding

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestShowBidi(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"plain ü":                   "plain ü",
		"a\u202eb\u202c":            "a[U+202E]b[U+202C]",
		"\u2066\u2069\u200e\u061c":  "[U+2066][U+2069][U+200E][U+061C]",
		"bad \xff utf8 \u200f keep": "bad \xff utf8 [U+200F] keep",
	} {
		assert.Equal(t, want, ShowBidi(in), "%q", in)
	}
}
