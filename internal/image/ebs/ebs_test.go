package ebs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkebs "github.com/aws/aws-sdk-go-v2/service/ebs"
	"github.com/aws/aws-sdk-go-v2/service/ebs/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/ebs"
	"github.com/amilint/amilint/internal/image/ebs/ebstest"
)

func config(secret string) aws.Config {
	return aws.Config{
		Region:      ebstest.Region,
		Credentials: credentials.NewStaticCredentialsProvider(ebstest.AccessKey, secret, ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 4
				o.MaxBackoff = 5 * time.Millisecond
			})
		},
	}
}

func volume() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 12*ebstest.BlockSize+1000)
	for i := range data {
		blk := i / ebstest.BlockSize
		if blk == 2 || blk == 5 || blk == 6 { // never-written blocks
			continue
		}
		data[i] = byte(r.Uint32())
	}
	return data
}

func start(t *testing.T, s *ebstest.Server) *sdkebs.Client {
	t.Helper()
	url := s.Start()
	t.Cleanup(s.Close)
	return sdkebs.NewFromConfig(config(ebstest.SecretKey), func(o *sdkebs.Options) { o.BaseEndpoint = aws.String(url) })
}

func TestSnapshotReadsWhatTheVolumeHolds(t *testing.T) {
	data := volume()
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: data}}}
	client := start(t, srv)
	var progress []int64
	var mu sync.Mutex
	snap, err := ebs.Open(context.Background(), client, "snap-1", ebs.Options{Parallel: 4, CacheBlocks: 4, ReadAhead: -1,
		Progress: func(f, _ int64) { mu.Lock(); progress = append(progress, f); mu.Unlock() }})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<30), snap.Size())
	assert.Equal(t, int64(10*ebstest.BlockSize), snap.Allocated(), "all-zero blocks are not listed")
	assert.Greater(t, srv.Requests, 3, "listing of 10 blocks in pages of 3 takes 4 calls")

	for _, c := range []struct{ off, n int }{
		{0, 100}, {ebstest.BlockSize - 10, 20}, {ebstest.BlockSize*2 - 5, ebstest.BlockSize*3 + 10},
		{0, len(data)}, {len(data) - 10, 10},
	} {
		buf := make([]byte, c.n)
		n, err := snap.ReadAt(buf, int64(c.off))
		require.NoError(t, err)
		require.Equal(t, c.n, n)
		assert.True(t, bytes.Equal(data[c.off:c.off+c.n], buf), "bytes at %d+%d", c.off, c.n)
	}
	// Past the data but inside the volume: zeros, nothing fetched.
	before := srv.Fetched
	buf := make([]byte, 4096)
	_, err = snap.ReadAt(buf, 100<<20)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 4096), buf)
	assert.Equal(t, before, srv.Fetched)
	assert.Zero(t, srv.BadSigned, "every request carries a valid SigV4 signature")
	assert.NotEmpty(t, progress)
	assert.Equal(t, snap.Fetched(), int64(srv.Fetched)*ebstest.BlockSize)
}

func TestThrottlingIsRetried(t *testing.T) {
	data := volume()
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: data}}, ThrottleFirst: 2}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{ReadAhead: -1})
	require.NoError(t, err)
	before := srv.Requests
	buf := make([]byte, 3*ebstest.BlockSize)
	_, err = snap.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, data[:len(buf)], buf)
	// Blocks 0 and 1 are allocated (2 is not): each was throttled twice,
	// then served, so the retries really happened.
	assert.Equal(t, 2, srv.Fetched)
	assert.Equal(t, 2*3, srv.Requests-before)
}

func TestFailedBlockIsAClearError(t *testing.T) {
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: volume()}}, FailBlocks: map[int]bool{3: true}}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{})
	require.NoError(t, err)
	_, err = snap.ReadAt(make([]byte, 10), 3*ebstest.BlockSize)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read snapshot snap-1 block 3")
	assert.Contains(t, err.Error(), "block unavailable")
	assert.Contains(t, err.Error(), "exceeded maximum number of attempts, 4") // retried, then given up
}

func TestCorruptBlockIsRejected(t *testing.T) {
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: volume()}}, CorruptBlocks: map[int]bool{0: true}}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{})
	require.NoError(t, err)
	_, err = snap.ReadAt(make([]byte, 10), 0)
	assert.ErrorIs(t, err, ebs.ErrCorrupt)
}

// TestBlockWithoutChecksumIsRejected: a block served without its
// checksum is not believed unchecked.
func TestBlockWithoutChecksumIsRejected(t *testing.T) {
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: volume()}}, UncheckedBlocks: map[int]bool{0: true}}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{})
	require.NoError(t, err)
	_, err = snap.ReadAt(make([]byte, 10), 0)
	require.ErrorIs(t, err, ebs.ErrCorrupt)
	assert.Contains(t, err.Error(), "read snapshot snap-1 block 0")
	assert.Contains(t, err.Error(), "no checksum")
}

func TestBadSignatureIsRefused(t *testing.T) {
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: volume()}}}
	url := srv.Start()
	defer srv.Close()
	client := sdkebs.NewFromConfig(config("wrong-secret"), func(o *sdkebs.Options) { o.BaseEndpoint = aws.String(url) })
	_, err := ebs.Open(context.Background(), client, "snap-1", ebs.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "signature does not match")
	assert.Positive(t, srv.BadSigned)
}

func TestRootSnapshotOfAMI(t *testing.T) {
	srv := &ebstest.Server{Images: map[string]ebstest.Image{"ami-0abc": {RootDevice: "/dev/sda1", SnapshotID: "snap-9"}}}
	url := srv.Start()
	defer srv.Close()
	client := ec2.NewFromConfig(config(ebstest.SecretKey), func(o *ec2.Options) { o.BaseEndpoint = aws.String(url) })
	id, err := ebs.RootSnapshot(context.Background(), client, "ami-0abc")
	require.NoError(t, err)
	assert.Equal(t, "snap-9", id)
	_, err = ebs.RootSnapshot(context.Background(), client, "ami-missing")
	assert.Error(t, err)
	assert.Zero(t, srv.BadSigned)
}

// TestSnapshotsOfAMI: the AMI's other EBS volumes are listed beside its
// root snapshot, its instance-store volumes are not.
func TestSnapshotsOfAMI(t *testing.T) {
	srv := &ebstest.Server{Images: map[string]ebstest.Image{
		"ami-0abc": {RootDevice: "/dev/xvda", SnapshotID: "snap-9"},
		"ami-0def": {RootDevice: "/dev/xvda", SnapshotID: "snap-9", Others: map[string]string{
			"/dev/sdb": "ephemeral0", "/dev/sdf": "snap-data", "/dev/sdg": "",
		}},
	}}
	url := srv.Start()
	defer srv.Close()
	client := ec2.NewFromConfig(config(ebstest.SecretKey), func(o *ec2.Options) { o.BaseEndpoint = aws.String(url) })
	root, others, err := ebs.Snapshots(context.Background(), client, "ami-0abc")
	require.NoError(t, err)
	assert.Equal(t, "snap-9", root)
	assert.Empty(t, others)
	root, others, err = ebs.Snapshots(context.Background(), client, "ami-0def")
	require.NoError(t, err)
	assert.Equal(t, "snap-9", root)
	assert.Equal(t, []string{"/dev/sdf snap-data", "/dev/sdg (a new empty volume)"}, others)
}

// TestConcurrentReadersFetchOnce: readers of one block at the same time
// share one fetch.
func TestConcurrentReadersFetchOnce(t *testing.T) {
	data := volume()
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: data}}, Latency: 20 * time.Millisecond}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{ReadAhead: -1})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			buf := make([]byte, 100)
			_, err := snap.ReadAt(buf, int64(ebstest.BlockSize+i*10))
			assert.NoError(t, err)
			assert.Equal(t, data[ebstest.BlockSize+i*10:ebstest.BlockSize+i*10+100], buf)
		})
	}
	wg.Wait()
	_, fetched, _ := srv.Counts()
	assert.Equal(t, 1, fetched)
}

// TestReadAheadFetchesTheNextAllocatedBlocks: a read on demand brings the
// next allocated blocks along, so reading them costs no request.
func TestReadAheadFetchesTheNextAllocatedBlocks(t *testing.T) {
	data := volume()
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: data}}}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{ReadAhead: 3})
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = snap.ReadAt(buf, 0)
	require.NoError(t, err)
	// Blocks 1, 3 and 4 follow block 0 (2 was never written).
	require.Eventually(t, func() bool { _, f, _ := srv.Counts(); return f == 4 }, 10*time.Second, 5*time.Millisecond)
	requests, _, _ := srv.Counts()
	for _, blk := range []int{1, 3, 4} {
		_, err := snap.ReadAt(buf, int64(blk*ebstest.BlockSize))
		require.NoError(t, err)
		assert.Equal(t, data[blk*ebstest.BlockSize:blk*ebstest.BlockSize+10], buf)
	}
	// Hits do not read ahead: only a miss does.
	again, fetched, _ := srv.Counts()
	assert.Equal(t, requests, again, "no request for blocks read ahead")
	assert.Equal(t, 4, fetched)
}

// TestSparseFileSnapshot: a snapshot served from a sparse file lists only
// the blocks that hold data.
func TestSparseFileSnapshot(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "vol"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(2<<30))
	_, err = f.WriteAt([]byte("hello"), 1<<30+5)
	require.NoError(t, err)
	srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {File: f, Size: 2 << 30}}}
	snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(2<<30), snap.Size())
	assert.Equal(t, int64(ebstest.BlockSize), snap.Allocated())
	buf := make([]byte, 5)
	_, err = snap.ReadAt(buf, 1<<30+5)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(buf))
}

// TestServerRounds: the fake counts the requests a client waited for one
// after another; requests made side by side count once.
func TestServerRounds(t *testing.T) {
	// Long enough for the four side by side to all be asked before the
	// first is answered, on a loaded machine too.
	srv := &ebstest.Server{Latency: 100 * time.Millisecond}
	url := srv.Start()
	defer srv.Close()
	get := func() {
		resp, err := http.Get(url + "/snapshots/snap-x/blocks/0")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get()
	get()
	assert.Equal(t, 2, srv.Rounds(), "two requests, each on the other's answer")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(get)
	}
	wg.Wait()
	assert.Equal(t, 3, srv.Rounds(), "four side by side are one round more")
	requests, _, _ := srv.Counts()
	assert.Equal(t, 6, requests)
}

// TestOpenFetchesBothEndsAtOnce: a disk reader's first two reads, the
// header at the start and the footer or backup table at the end, cost
// one round trip after the listing, not two; with no read-ahead (the
// strictly sequential yardstick) they still cost two.
func TestOpenFetchesBothEndsAtOnce(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "vol"))
	require.NoError(t, err)
	defer f.Close()
	const size = 1 << 30
	require.NoError(t, f.Truncate(size))
	// Blocks 0 to 8 and the last: reading ahead after block 0 does not
	// reach the last.
	for _, off := range []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, size/ebstest.BlockSize - 1} {
		_, err = f.WriteAt([]byte("data"), off*ebstest.BlockSize+ebstest.BlockSize-512)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		readAhead, rounds, fetched int
	}{{0, 2, 6}, {-1, 3, 2}} {
		// Long enough for requests side by side to all be asked before
		// the first is answered, on a loaded machine too.
		srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {File: f, Size: size}}, PageSize: 100, Latency: 100 * time.Millisecond}
		snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", ebs.Options{ReadAhead: c.readAhead})
		require.NoError(t, err)
		buf := make([]byte, 4)
		for _, off := range []int64{ebstest.BlockSize - 512, size - 512} {
			_, err = snap.ReadAt(buf, off)
			require.NoError(t, err)
			assert.Equal(t, "data", string(buf))
		}
		if c.readAhead == 0 {
			// Blocks 1 to 4 were read ahead after block 0, side by side
			// with it.
			require.Eventually(t, func() bool { _, n, _ := srv.Counts(); return n == c.fetched }, 10*time.Second, 5*time.Millisecond)
		}
		_, fetched, _ := srv.Counts()
		assert.Equal(t, c.rounds, srv.Rounds(), "read-ahead %d", c.readAhead)
		assert.Equal(t, c.fetched, fetched, "read-ahead %d", c.readAhead)
	}
}

// TestPrefetchFetchesARange: Prefetch starts fetching the allocated
// blocks of a range that are not fetched yet, at most half the cache's
// blocks, and nothing without read-ahead (the strictly sequential fetch);
// a later read of them asks nothing more.
func TestPrefetchFetchesARange(t *testing.T) {
	data := volume() // blocks 0 to 12, of which 2, 5 and 6 are never written
	bs := int64(ebstest.BlockSize)
	for _, c := range []struct {
		name    string
		opt     ebs.Options
		off, n  int64
		request int
	}{
		// Blocks 1 to 5: 1 came with block 0 at Open, 3 and 4 are asked.
		{"a range", ebs.Options{ReadAhead: 1}, bs + 10, 4 * bs, 2},
		// Blocks 3 to 11, of which the first two only: 3 and 4.
		{"bounded by the cache", ebs.Options{ReadAhead: 1, CacheBlocks: 4}, 3 * bs, 9 * bs, 2},
		{"no read-ahead", ebs.Options{ReadAhead: -1}, 0, 12 * bs, 0},
		{"past the end", ebs.Options{ReadAhead: 1}, 1 << 30, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &ebstest.Server{Snapshots: map[string]ebstest.Snapshot{"snap-1": {Data: data}}, PageSize: 100}
			snap, err := ebs.Open(context.Background(), start(t, srv), "snap-1", c.opt)
			require.NoError(t, err)
			if c.opt.ReadAhead > 0 {
				// Block 0 and the one after it, fetched at Open.
				require.Eventually(t, func() bool { _, f, _ := srv.Counts(); return f == 2 }, 10*time.Second, 5*time.Millisecond)
			}
			base, _, _ := srv.Counts()
			snap.Prefetch(c.off, c.n)
			want := base + c.request
			require.Eventually(t, func() bool { r, _, _ := srv.Counts(); return r == want }, 10*time.Second, 5*time.Millisecond)
			if c.request > 0 {
				buf := make([]byte, 10)
				_, err := snap.ReadAt(buf, 3*bs+10)
				require.NoError(t, err)
				assert.Equal(t, data[3*bs+10:3*bs+20], buf)
			}
			time.Sleep(50 * time.Millisecond) // nothing more comes
			requests, _, _ := srv.Counts()
			assert.Equal(t, want, requests)
		})
	}
}

// stallingAPI lists blocks 0 to n-1 of a 1 GiB volume and answers no block
// request until its context ends; it counts the requests in flight and
// those that ended by cancellation.
type stallingAPI struct {
	n                 int32
	mu                sync.Mutex
	inFlight, started int
	cancelled         int
}

func (a *stallingAPI) ListSnapshotBlocks(ctx context.Context, in *sdkebs.ListSnapshotBlocksInput, _ ...func(*sdkebs.Options)) (*sdkebs.ListSnapshotBlocksOutput, error) {
	out := &sdkebs.ListSnapshotBlocksOutput{BlockSize: aws.Int32(ebstest.BlockSize), VolumeSize: aws.Int64(1)}
	for i := range a.n {
		out.Blocks = append(out.Blocks, types.Block{BlockIndex: aws.Int32(i), BlockToken: aws.String("t")})
	}
	return out, nil
}

func (a *stallingAPI) GetSnapshotBlock(ctx context.Context, in *sdkebs.GetSnapshotBlockInput, _ ...func(*sdkebs.Options)) (*sdkebs.GetSnapshotBlockOutput, error) {
	a.mu.Lock()
	a.inFlight++
	a.started++
	a.mu.Unlock()
	<-ctx.Done()
	a.mu.Lock()
	a.inFlight--
	a.cancelled++
	a.mu.Unlock()
	return nil, ctx.Err()
}

func (a *stallingAPI) counts() (inFlight, started, cancelled int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight, a.started, a.cancelled
}

// TestCloseStopsFetchesInFlight: closing a snapshot cancels the fetches it
// started ahead of any reader (at Open, read ahead, prefetched) and those a
// reader waits for, and returns only when every one has ended; reads after
// it fail with fs.ErrClosed and start nothing. Without it, a caller that
// opens and closes images in one process leaves requests running.
func TestCloseStopsFetchesInFlight(t *testing.T) {
	api := &stallingAPI{n: 40}
	var progress atomic.Int32
	snap, err := ebs.Open(context.Background(), api, "snap-1", ebs.Options{ReadAhead: 3, Parallel: 64,
		Progress: func(int64, int64) { progress.Add(1) }})
	require.NoError(t, err)
	snap.Prefetch(20*ebstest.BlockSize, 4*ebstest.BlockSize)
	read := make(chan error, 1)
	go func() {
		_, err := snap.ReadAt(make([]byte, 10), 10*ebstest.BlockSize)
		read <- err
	}()
	// Blocks 0 to 3 are asked at Open (the volume's last block is not
	// allocated), 20 to 23 by Prefetch, 10 to 13 by the read and its
	// read-ahead.
	require.Eventually(t, func() bool { n, _, _ := api.counts(); return n == 12 }, 10*time.Second, time.Millisecond)

	closed := make(chan error, 1)
	go func() { closed <- snap.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: fetches in flight were not cancelled")
	}
	inFlight, started, cancelled := api.counts()
	assert.Zero(t, inFlight, "Close returned with requests in flight")
	assert.Equal(t, started, cancelled)
	select {
	case err := <-read:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader waiting on a block was not released by Close")
	}

	_, err = snap.ReadAt(make([]byte, 10), 30*ebstest.BlockSize)
	require.ErrorIs(t, err, fs.ErrClosed)
	snap.Prefetch(30*ebstest.BlockSize, ebstest.BlockSize)
	_, after, _ := api.counts()
	assert.Equal(t, started, after, "a closed snapshot started a request")
	assert.Zero(t, progress.Load())
	require.NoError(t, snap.Close(), "closing twice")
}

// pagesAPI answers ListSnapshotBlocks with page(n) for its n-th call
// (from 0) and counts the calls; it serves no block.
type pagesAPI struct {
	page  func(n int) *sdkebs.ListSnapshotBlocksOutput
	calls atomic.Int32
}

func (a *pagesAPI) ListSnapshotBlocks(ctx context.Context, in *sdkebs.ListSnapshotBlocksInput, _ ...func(*sdkebs.Options)) (*sdkebs.ListSnapshotBlocksOutput, error) {
	return a.page(int(a.calls.Add(1) - 1)), nil
}

func (a *pagesAPI) GetSnapshotBlock(ctx context.Context, in *sdkebs.GetSnapshotBlockInput, _ ...func(*sdkebs.Options)) (*sdkebs.GetSnapshotBlockOutput, error) {
	return nil, context.Canceled
}

// TestListingThatNeverEndsIsRefusedSoon: a listing whose NextToken cycles
// (or is new each time) while its pages list no block not listed before is
// refused after a few pages, not after a million round trips.
func TestListingThatNeverEndsIsRefusedSoon(t *testing.T) {
	for name, next := range map[string]func(n int) string{
		"cycling":    func(n int) string { return []string{"a", "b"}[n%2] },
		"always new": func(n int) string { return fmt.Sprint("page-", n) },
	} {
		t.Run(name, func(t *testing.T) {
			api := &pagesAPI{page: func(n int) *sdkebs.ListSnapshotBlocksOutput {
				return &sdkebs.ListSnapshotBlocksOutput{BlockSize: aws.Int32(ebstest.BlockSize), VolumeSize: aws.Int64(1),
					Blocks: []types.Block{{BlockIndex: aws.Int32(3), BlockToken: aws.String("t")}}, NextToken: aws.String(next(n))}
			}}
			_, err := ebs.Open(context.Background(), api, "snap-1", ebs.Options{ReadAhead: -1})
			require.ErrorIs(t, err, ebs.ErrCorrupt)
			assert.Contains(t, err.Error(), "pagination does not end")
			assert.Less(t, api.calls.Load(), int32(1000))
		})
	}
}

// TestHugeBlockSizeIsRefused: the block size sizes every fetch's buffer
// and every cached block; one of a GiB is refused at Open, before any
// buffer is made (EBS's blocks are 512 KiB).
func TestHugeBlockSizeIsRefused(t *testing.T) {
	for _, bs := range []int32{1 << 30, 2 << 20, 1<<31 - 512} {
		api := &pagesAPI{page: func(int) *sdkebs.ListSnapshotBlocksOutput {
			return &sdkebs.ListSnapshotBlocksOutput{BlockSize: aws.Int32(bs), VolumeSize: aws.Int64(16)}
		}}
		_, err := ebs.Open(context.Background(), api, "snap-1", ebs.Options{ReadAhead: -1})
		require.ErrorIs(t, err, ebs.ErrCorrupt, "block size %d", bs)
		assert.Contains(t, err.Error(), fmt.Sprint("block size ", bs))
	}
}
