package amilint_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stages are internal/'s top-level folders in the order data flows through
// them (ARCHITECTURE.md): a package may import packages of its own stage
// or of an earlier one, never of a later one.
var stages = []string{"image", "systemd", "audit", "host", "report", "cli"}

const module = "github.com/amilint/amilint/"

// goPackage is one directory of Go files under internal/.
type goPackage struct {
	dir     string          // slash path from the repository root
	doc     bool            // some non-test file has a package doc comment
	imports map[string]bool // import paths of the project, test files included
}

func internalPackages(t *testing.T) []goPackage {
	t.Helper()
	byDir := map[string]*goPackage{}
	err := filepath.WalkDir("internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		p := byDir[dir]
		if p == nil {
			p = &goPackage{dir: dir, imports: map[string]bool{}}
			byDir[dir] = p
		}
		if f.Doc != nil && !strings.HasSuffix(path, "_test.go") {
			p.doc = true
		}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(ip, module); ok {
				p.imports[rest] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	var out []goPackage
	for _, p := range byDir {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b goPackage) int { return strings.Compare(a.dir, b.dir) })
	require.NotEmpty(t, out)
	return out
}

// stageOf returns the index in stages of an internal/ path, or -1 for a
// path outside internal/ (rules, policies, fixtures: data packages any
// stage may embed).
func stageOf(t *testing.T, dir string) int {
	rest, ok := strings.CutPrefix(dir, "internal/")
	if !ok {
		return -1
	}
	top, _, _ := strings.Cut(rest, "/")
	i := slices.Index(stages, top)
	if i < 0 {
		t.Errorf("%s is in no stage: internal/ holds only %v", dir, stages)
	}
	return i
}

// TestLayering fails when a package imports one from a later stage, so the
// one-way flow ARCHITECTURE.md describes stays true.
func TestLayering(t *testing.T) {
	top, err := os.ReadDir("internal")
	require.NoError(t, err)
	var folders []string
	for _, e := range top {
		if e.IsDir() {
			folders = append(folders, e.Name())
		}
	}
	assert.ElementsMatch(t, stages, folders, "internal/ has one folder per stage")

	for _, p := range internalPackages(t) {
		from := stageOf(t, p.dir)
		for im := range p.imports {
			to := stageOf(t, im)
			if to > from {
				t.Errorf("%s (stage %s) imports %s (stage %s, later in the flow)", p.dir, stages[from], im, stages[to])
			}
		}
	}
}

// TestEveryPackageDocumented requires a package doc comment in every
// package under internal/, and every package folder named in
// ARCHITECTURE.md, so a newcomer finds each one from the map.
func TestEveryPackageDocumented(t *testing.T) {
	arch, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	for _, p := range internalPackages(t) {
		assert.True(t, p.doc, "%s has no package doc comment saying what it owns", p.dir)
		assert.Contains(t, string(arch), "`"+p.dir+"`", "ARCHITECTURE.md does not name %s", p.dir)
	}
}
