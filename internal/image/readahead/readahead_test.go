package readahead_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/internal/image/readahead"
)

// source records the ranges it is told of.
type source struct {
	io.ReaderAt
	got [][2]int64
}

func (s *source) Prefetch(off, n int64) { s.got = append(s.got, [2]int64{off, n}) }

func TestHintReachesTheSourceThroughSections(t *testing.T) {
	src := &source{ReaderAt: bytes.NewReader(make([]byte, 1000))}
	disk := io.NewSectionReader(src, 0, 1000)
	part := io.NewSectionReader(disk, 100, 500)
	readahead.Hint(part, 10, 20)
	readahead.Hint(part, 490, 50) // clipped at the partition's end
	readahead.Hint(part, 500, 10) // past it: nothing
	readahead.Hint(part, -1, 10)  // nothing
	readahead.Hint(part, 10, 0)   // nothing
	assert.Equal(t, [][2]int64{{110, 20}, {590, 10}}, src.got)
	assert.True(t, readahead.Accepts(part))

	// Another layer in between ends the search.
	src.got = nil
	readahead.Hint(io.NewSectionReader(struct{ io.ReaderAt }{src}, 0, 1000), 0, 10)
	readahead.Hint(bytes.NewReader(nil), 0, 10)
	assert.Empty(t, src.got)
	assert.False(t, readahead.Accepts(io.NewSectionReader(struct{ io.ReaderAt }{src}, 0, 1000)))
	assert.False(t, readahead.Accepts(bytes.NewReader(nil)))
}
