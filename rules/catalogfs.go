package rules

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// catalogFile is one *.yaml or *.yml file of a catalog directory.
type catalogFile struct {
	name string // the file name
	stem string // the name without its extension: the rule id or profile name
	src  string // where it came from, for messages ("embedded:ecs.yaml")
	data []byte
}

// readCatalog reads the YAML files of dir in fsys (not its subdirectories).
// A file that cannot be read is a problem reported with the others; a
// directory that cannot be listed is an error. what names the catalog
// ("rules", "profiles") in messages.
func readCatalog(fsys fs.FS, dir, prefix, what string) ([]catalogFile, []error, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s %s: %w", what, strings.TrimSuffix(prefix, "/"), err)
	}
	var files []catalogFile
	var errs []error
	for _, e := range ents {
		name := e.Name()
		stem, ok := strings.CutSuffix(name, ".yaml")
		if !ok {
			stem, ok = strings.CutSuffix(name, ".yml")
		}
		if e.IsDir() || !ok {
			continue
		}
		src := prefix + name
		b, err := readLimited(fsys, path.Join(dir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			continue
		}
		files = append(files, catalogFile{name: name, stem: stem, src: src, data: b})
	}
	return files, errs, nil
}

// userDir opens a user's catalog directory (--rules DIR), refusing what is
// missing or not a directory.
func userDir(dir, what string) (fs.FS, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s %s: %w", what, dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("load %s %s: not a directory", what, dir)
	}
	return os.DirFS(dir), nil
}

// mergeBy returns base with every item of override added, replacing the
// base item with the same key; the result is sorted by key.
func mergeBy[T any](base, override []T, key func(T) string) []T {
	byKey := make(map[string]T, len(base)+len(override))
	for _, x := range base {
		byKey[key(x)] = x
	}
	for _, x := range override {
		byKey[key(x)] = x
	}
	out := make([]T, 0, len(byKey))
	for _, x := range byKey {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	return out
}

// parseEach parses every file's data with parse, many at once
// (rootfs.ForEach): yaml.v3 is slow (the embedded catalog's YAML was about
// 3 ms of a scan before it was compiled into Go), a user's catalog can be
// as large, and each file is independent. The results are in the order of
// files.
func parseEach[T any](files []catalogFile, parse func([]byte) (T, error)) ([]T, []error) {
	out, errs := make([]T, len(files)), make([]error, len(files))
	rootfs.ForEach(len(files), func(i int) { out[i], errs[i] = parse(files[i].data) })
	return out, errs
}
