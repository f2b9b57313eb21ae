package imagetest

import (
	"io"
	"io/fs"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Scratch owns a test binary's temporary directories: the shared source
// tree and the benchmark image, each built once. Run removes them.
type Scratch struct {
	// Prefix starts the directories' names ("ext4-").
	Prefix string
	// Options chooses what the shared tree holds.
	Options Options

	treeOnce  sync.Once
	tree      string
	benchOnce sync.Once
	benchImg  string
	mu        sync.Mutex
	dirs      []string
}

// mkdir makes a temporary directory that Run removes.
func (s *Scratch) mkdir(t testing.TB, kind string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", s.Prefix+kind+"-")
	require.NoError(t, err)
	s.mu.Lock()
	s.dirs = append(s.dirs, dir)
	s.mu.Unlock()
	return dir
}

// Tree returns the shared source tree, built once per test binary.
func (s *Scratch) Tree(t testing.TB) string {
	t.Helper()
	s.treeOnce.Do(func() {
		dir := s.mkdir(t, "tree")
		BuildTree(t, dir, s.Options)
		s.tree = dir
	})
	require.NotEmpty(t, s.tree, "tree build failed earlier")
	return s.tree
}

// BenchImage returns the benchmark image, built once per test binary by
// mkfs, which makes an image in dir of the tree src (see BenchTree) and
// returns its path.
func (s *Scratch) BenchImage(b *testing.B, mkfs func(dir, src string) string) string {
	b.Helper()
	s.benchOnce.Do(func() {
		dir := s.mkdir(b, "bench")
		s.benchImg = mkfs(dir, BenchTree(b, dir))
	})
	require.NotEmpty(b, s.benchImg, "bench image build failed earlier")
	return s.benchImg
}

// Run runs the tests, removes the directories and returns the exit code,
// for TestMain to pass to os.Exit.
func (s *Scratch) Run(m *testing.M) int {
	code := m.Run()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dirs {
		os.RemoveAll(d)
	}
	return code
}

// OpenImage opens the image file img with a reader's probe and open
// functions (ext4.Probe and ext4.Open, say); the probe must accept it.
func OpenImage[F rootfs.Source](t testing.TB, img string, probe func(io.ReaderAt) bool, open func(io.ReaderAt, int64) (F, error)) F {
	t.Helper()
	fh, err := os.Open(img)
	require.NoError(t, err)
	t.Cleanup(func() { fh.Close() })
	fi, err := fh.Stat()
	require.NoError(t, err)
	require.True(t, probe(fh), "probe %s", img)
	f, err := open(fh, fi.Size())
	require.NoError(t, err)
	return f
}

// NoLinks hides ReadLinkFS so fstest.TestFS and fs.WalkDir see plain
// fs.FS behaviour.
type NoLinks struct{ Source rootfs.Source }

// Open opens the named file.
func (n NoLinks) Open(name string) (fs.File, error) { return n.Source.Open(name) }

// ReadDir lists the named directory.
func (n NoLinks) ReadDir(name string) ([]fs.DirEntry, error) { return n.Source.ReadDir(name) }

// ConcurrentWalks walks fsys from several goroutines at once and checks
// each sees what one walk alone sees: a reader's caches are shared, so
// run it with -race after changing them.
func ConcurrentWalks(t *testing.T, fsys rootfs.Source) {
	t.Helper()
	want, err := Walk(fsys, 1<<20)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			n, err := Walk(fsys, 1<<20)
			assert.NoError(t, err)
			assert.Equal(t, want, n)
		})
	}
	wg.Wait()
}

// BenchmarkListSystemdDirs measures what listing the SystemdDirs of the
// image img costs: opening the filesystem with open, resolving the paths
// through the chroot view (/lib is a link on merged-/usr Debian) and
// reading the directories. B/op-read is the image bytes read.
func BenchmarkListSystemdDirs[F rootfs.Source](b *testing.B, img string, open func(io.ReaderAt, int64) (F, error)) {
	fh, err := os.Open(img)
	require.NoError(b, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(b, err)
	b.ResetTimer()
	var read int64
	entries := 0
	for b.Loop() {
		c := &CountingReaderAt{R: fh}
		f, err := open(c, fi.Size())
		require.NoError(b, err)
		view := rootfs.New(f)
		entries = 0
		for _, d := range SystemdDirs {
			list, err := view.ReadDir(d)
			require.NoError(b, err)
			entries += len(list)
		}
		read += c.Bytes.Load()
	}
	b.ReportMetric(float64(read)/float64(b.N), "B/op-read")
	b.ReportMetric(float64(entries), "entries")
	b.ReportMetric(100*float64(read)/float64(b.N)/float64(fi.Size()), "%image-read")
}
