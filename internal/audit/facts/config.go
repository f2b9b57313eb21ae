package facts

import (
	"encoding/json"
	"errors"
	"io/fs"
	"slices"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// maxDirEntries bounds the names kept for a directory.
const maxDirEntries = 1000

// readConfig reads the configuration file at the image-absolute path p.
func readConfig(fsys *rootfs.FS, p, format string) *ConfigFile {
	guessed := format == ""
	if guessed {
		format = guessFormat(p)
	}
	c := &ConfigFile{Path: p, Format: format, Keys: map[string]string{}}
	name := rootfs.Clean(p)
	fi, err := fsys.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, rootfs.ErrMasked):
		return c
	case err != nil:
		c.Exists = true
		c.Error = err.Error()
		return c
	}
	c.Exists = true
	if guessed && fi.IsDir() {
		format, c.Format = "dir", "dir"
	}
	if format == "dir" {
		if !fi.IsDir() {
			c.Error = "not a directory"
			return c
		}
		ents, err := fsys.ReadDir(name)
		if err != nil {
			c.Error = err.Error()
			return c
		}
		for _, e := range ents {
			if len(c.Entries) == maxDirEntries {
				break
			}
			c.Entries = append(c.Entries, e.Name())
		}
		slices.Sort(c.Entries)
		c.ParseOK = true
		return c
	}
	if !fi.Mode().IsRegular() {
		c.Error = "not a regular file"
		return c
	}
	c.Size = fi.Size()
	if format == "file" {
		c.ParseOK = true
		return c
	}
	b, err := readLimited(fsys, name)
	if err != nil {
		c.Error = err.Error()
		return c
	}
	switch format {
	case "env":
		e := ParseEnv(b)
		c.Keys = e.Keys
		c.ParseOK = len(e.Problems) == 0
		if !c.ParseOK {
			c.Error = e.Problems[0]
		}
	case "json":
		if !json.Valid(b) {
			c.Error = "not valid JSON"
			return c
		}
		c.ParseOK = true
	default:
		c.Error = "unknown format " + format
	}
	return c
}
