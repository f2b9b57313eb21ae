// Package ebs reads an EBS snapshot as a disk, block by block, through the
// EBS direct APIs (ListSnapshotBlocks, GetSnapshotBlock), and resolves an AMI
// to its root snapshot. It creates no volume, attaches nothing and writes
// nothing: a snapshot is read-only data here. Only the blocks a reader asks
// for, and a few allocated blocks after each (read-ahead), are fetched, in
// parallel, each once however many readers want it at the same time,
// verified against their SHA-256 checksums and kept in a bounded cache.
package ebs

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ebs"
)

// API is the part of the EBS direct APIs client the reader uses;
// *ebs.Client implements it.
type API interface {
	ListSnapshotBlocks(ctx context.Context, in *ebs.ListSnapshotBlocksInput, opts ...func(*ebs.Options)) (*ebs.ListSnapshotBlocksOutput, error)
	GetSnapshotBlock(ctx context.Context, in *ebs.GetSnapshotBlockInput, opts ...func(*ebs.Options)) (*ebs.GetSnapshotBlockOutput, error)
}

// ErrCorrupt reports a snapshot whose listing or blocks do not make sense:
// a bad checksum, a block of the wrong size, an index past the volume.
var ErrCorrupt = errors.New("corrupt snapshot data")

// maxBlockSize bounds a snapshot's block size, which sizes every fetch's
// buffer and every cached block: the EBS direct APIs' blocks are 512 KiB.
const maxBlockSize = 512 << 10

// maxIdlePages bounds the pages of a listing that list no block not listed
// before: a NextToken that cycles, or is new on every page of nothing new,
// would otherwise page on for a million round trips.
const maxIdlePages = 64

// Options tune a Snapshot.
type Options struct {
	// Parallel bounds concurrent GetSnapshotBlock calls (default 16).
	Parallel int
	// ReadAhead is how many allocated blocks after one read on demand are
	// fetched with it, in the background (default 4; -1 for none): files
	// and directories written together lie together, and each block saved
	// is a round trip to the region saved. Unless it is -1, Open also
	// starts fetching the volume's first and last blocks, which every
	// reader of a disk asks for first.
	ReadAhead int
	// CacheBlocks bounds the blocks kept in memory (default 256, 128 MiB
	// with 512 KiB blocks).
	CacheBlocks int
	// Progress, when set, is called after each fetched block with the
	// bytes fetched so far and the bytes the snapshot holds.
	Progress func(fetched, allocated int64)
}

// Snapshot is an EBS snapshot read as a disk. It implements io.ReaderAt.
type Snapshot struct {
	ctx       context.Context
	cancel    context.CancelFunc
	api       API
	id        string
	blockSize int64
	size      int64
	tokens    map[int64]string
	opt       Options

	order   []int64 // allocated block indexes, ascending
	fetched atomic.Int64
	sem     chan struct{} // bounds concurrent fetches

	mu       sync.Mutex
	cache    map[int64]*list.Element
	lru      *list.List
	inflight map[int64]*pending
	closed   atomic.Bool    // set under mu, read anywhere
	running  sync.WaitGroup // fetches started, waited for by Close
}

// pending is a fetch in progress that later readers of the block wait for.
type pending struct {
	done chan struct{}
	data []byte
	err  error
}

type cached struct {
	index int64
	data  []byte
}

// Open lists the blocks of snapshot id. ctx bounds every later read too.
// Close the Snapshot to stop the fetches it started ahead of any reader.
func Open(ctx context.Context, api API, id string, opt Options) (*Snapshot, error) {
	if opt.Parallel <= 0 {
		opt.Parallel = 16
	}
	if opt.CacheBlocks <= 0 {
		opt.CacheBlocks = 256
	}
	if opt.ReadAhead == 0 {
		opt.ReadAhead = 4
	}
	s := &Snapshot{api: api, id: id, opt: opt, tokens: map[int64]string{},
		cache: map[int64]*list.Element{}, lru: list.New(), inflight: map[int64]*pending{},
		sem: make(chan struct{}, opt.Parallel)}
	var next *string
	idle := 0 // pages that listed no block not listed before
	for page := 0; ; page++ {
		if page > 1<<20 || idle > maxIdlePages {
			return nil, fmt.Errorf("list snapshot %s blocks: %w: pagination does not end", id, ErrCorrupt)
		}
		out, err := api.ListSnapshotBlocks(ctx, &ebs.ListSnapshotBlocksInput{
			SnapshotId: aws.String(id), NextToken: next, MaxResults: aws.Int32(10000)})
		if err != nil {
			return nil, fmt.Errorf("list snapshot %s blocks: %w", id, err)
		}
		if s.blockSize == 0 {
			bs, vs := aws.ToInt32(out.BlockSize), aws.ToInt64(out.VolumeSize)
			if bs <= 0 || bs%512 != 0 || bs > maxBlockSize || vs <= 0 || vs > 64<<10 {
				return nil, fmt.Errorf("list snapshot %s blocks: %w: block size %d, volume size %d GiB", id, ErrCorrupt, bs, vs)
			}
			s.blockSize, s.size = int64(bs), vs<<30
		}
		known := len(s.tokens)
		for _, b := range out.Blocks {
			idx := int64(aws.ToInt32(b.BlockIndex))
			if idx < 0 || idx*s.blockSize >= s.size || aws.ToString(b.BlockToken) == "" {
				return nil, fmt.Errorf("list snapshot %s blocks: %w: block %d", id, ErrCorrupt, idx)
			}
			s.tokens[idx] = aws.ToString(b.BlockToken)
		}
		if len(s.tokens) == known {
			idle++
		}
		next = out.NextToken
		if aws.ToString(next) == "" {
			break
		}
	}
	s.order = slices.Sorted(maps.Keys(s.tokens))
	s.ctx, s.cancel = context.WithCancel(ctx)
	if opt.ReadAhead > 0 {
		// Every disk format and partition table keeps its header in the
		// volume's first block and a footer or backup table in its last,
		// and a reader asks for both first, one after the other. Fetching
		// both now, the first with its read-ahead (where the first
		// partitions' filesystems start), makes that one round trip.
		s.fetchAhead(0)
		s.fetchAhead(s.size/s.blockSize - 1)
	}
	return s, nil
}

// fetchAhead starts fetching block i, if allocated and neither cached nor
// being fetched, and reads ahead after it; nobody waits for it.
func (s *Snapshot) fetchAhead(i int64) {
	if _, ok := s.tokens[i]; !ok {
		return
	}
	if _, _, started := s.lookup(i); started {
		s.readAhead(i)
	}
}

// Size is the volume size in bytes.
func (s *Snapshot) Size() int64 { return s.size }

// BlockSize is the snapshot's block size in bytes.
func (s *Snapshot) BlockSize() int64 { return s.blockSize }

// Allocated is the number of bytes the snapshot holds (blocks listed).
func (s *Snapshot) Allocated() int64 { return int64(len(s.tokens)) * s.blockSize }

// Fetched is the number of bytes fetched from the service so far.
func (s *Snapshot) Fetched() int64 { return s.fetched.Load() }

// ReadAt reads len(p) bytes at off. Blocks the snapshot does not hold read
// as zeros, as they do on a volume restored from it.
func (s *Snapshot) ReadAt(p []byte, off int64) (int, error) {
	if s.closed.Load() {
		return 0, s.stopped()
	}
	if off < 0 {
		return 0, fmt.Errorf("read snapshot %s: negative offset", s.id)
	}
	if off >= s.size {
		return 0, io.EOF
	}
	n := len(p)
	var eof error
	if int64(n) > s.size-off {
		n, eof = int(s.size-off), io.EOF
	}
	first, last := off/s.blockSize, (off+int64(n)-1)/s.blockSize
	blocks, err := s.blocks(first, last)
	if err != nil {
		return 0, err
	}
	done := 0
	for i := first; i <= last && done < n; i++ {
		bo := int64(0)
		if i == first {
			bo = off - first*s.blockSize
		}
		b := blocks[i-first]
		chunk := min(int64(n-done), s.blockSize-bo)
		if b == nil {
			clear(p[done : done+int(chunk)])
		} else {
			copy(p[done:done+int(chunk)], b[bo:bo+chunk])
		}
		done += int(chunk)
	}
	return n, eof
}

// blocks returns blocks first..last (nil for unallocated ones), fetching the
// missing ones in parallel, and starts reading ahead past the last one
// fetched.
func (s *Snapshot) blocks(first, last int64) ([][]byte, error) {
	out := make([][]byte, last-first+1)
	waits := make([]*pending, len(out))
	missed := int64(-1)
	for i := first; i <= last; i++ {
		if _, ok := s.tokens[i]; !ok {
			continue
		}
		b, p, started := s.lookup(i)
		if b != nil {
			out[i-first] = b
			continue
		}
		waits[i-first] = p
		if started {
			missed = i
		}
	}
	if missed >= 0 && s.opt.ReadAhead > 0 {
		s.readAhead(missed)
	}
	var errs []error
	for i, p := range waits {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-s.ctx.Done():
			return nil, s.stopped()
		}
		if p.err != nil {
			errs = append(errs, p.err)
		}
		out[i] = p.data
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// lookup returns block i from the cache, or the fetch of it in progress,
// starting one (started) when there is none.
func (s *Snapshot) lookup(i int64) (data []byte, p *pending, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.cache[i]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*cached).data, nil, false
	}
	if p, ok := s.inflight[i]; ok {
		return nil, p, false
	}
	p = &pending{done: make(chan struct{})}
	if s.closed.Load() {
		p.err = s.stopped()
		close(p.done)
		return nil, p, false
	}
	s.inflight[i] = p
	s.running.Add(1)
	go s.run(i, p)
	return nil, p, true
}

// stopped is the error of a read that Close or the caller's context ended.
func (s *Snapshot) stopped() error {
	return fmt.Errorf("read snapshot %s: %w", s.id, s.stopCause())
}

func (s *Snapshot) stopCause() error {
	if s.closed.Load() {
		return fs.ErrClosed
	}
	return s.ctx.Err()
}

// Close stops the Snapshot: it cancels every fetch in flight, read ahead
// or waited for, and returns once they have all ended, so that no request
// and no Progress call outlives it. Reads after Close fail with
// fs.ErrClosed. Closing twice is harmless.
func (s *Snapshot) Close() error {
	s.mu.Lock()
	s.closed.Store(true)
	s.mu.Unlock()
	s.cancel()
	s.running.Wait()
	return nil
}

// run fetches block i for the readers waiting on p.
func (s *Snapshot) run(i int64, p *pending) {
	defer s.running.Done()
	select {
	case s.sem <- struct{}{}:
		p.data, p.err = s.fetch(s.ctx, i, s.tokens[i])
		<-s.sem
	case <-s.ctx.Done():
		p.err = fmt.Errorf("read snapshot %s block %d: %w", s.id, i, s.stopCause())
	}
	s.mu.Lock()
	delete(s.inflight, i)
	if p.err == nil {
		s.putLocked(i, p.data)
	}
	s.mu.Unlock()
	close(p.done)
}

// Prefetch starts fetching the allocated blocks that hold the n bytes at
// off, unless cached or being fetched, and returns at once; nobody waits
// for them (readahead.Source). A reader tells of what it will read next
// (the blocks of a directory) and the blocks come side by side. It fetches
// at most half the cache's blocks, and nothing without read-ahead (the
// strictly sequential fetch).
func (s *Snapshot) Prefetch(off, n int64) {
	if s.opt.ReadAhead < 0 || off < 0 || n <= 0 || off >= s.size {
		return
	}
	first, last := off/s.blockSize, (min(off+n, s.size)-1)/s.blockSize
	last = min(last, first+int64(s.opt.CacheBlocks)/2-1)
	for i := first; i <= last; i++ {
		if _, ok := s.tokens[i]; ok {
			s.lookup(i)
		}
	}
}

// readAhead starts fetching the ReadAhead allocated blocks after block i
// that are neither cached nor being fetched; nobody waits for them.
func (s *Snapshot) readAhead(i int64) {
	j, _ := slices.BinarySearch(s.order, i+1)
	for n := 0; n < s.opt.ReadAhead && j < len(s.order); j++ {
		s.lookup(s.order[j])
		n++
	}
}

func (s *Snapshot) fetch(ctx context.Context, i int64, tok string) ([]byte, error) {
	out, err := s.api.GetSnapshotBlock(ctx, &ebs.GetSnapshotBlockInput{
		SnapshotId: aws.String(s.id), BlockIndex: aws.Int32(int32(i)), BlockToken: aws.String(tok)})
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s block %d: %w", s.id, i, err)
	}
	defer out.BlockData.Close()
	buf := make([]byte, s.blockSize)
	n, err := io.ReadFull(out.BlockData, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("read snapshot %s block %d: %w", s.id, i, err)
	}
	if int64(n) != s.blockSize || (out.DataLength != nil && int64(*out.DataLength) != s.blockSize) {
		return nil, fmt.Errorf("read snapshot %s block %d: %w: %d bytes, want %d", s.id, i, ErrCorrupt, n, s.blockSize)
	}
	if extra, _ := io.ReadFull(out.BlockData, make([]byte, 1)); extra != 0 {
		return nil, fmt.Errorf("read snapshot %s block %d: %w: longer than the block size", s.id, i, ErrCorrupt)
	}
	want := aws.ToString(out.Checksum)
	if want == "" {
		return nil, fmt.Errorf("read snapshot %s block %d: %w: no checksum", s.id, i, ErrCorrupt)
	}
	sum := sha256.Sum256(buf)
	if base64.StdEncoding.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("read snapshot %s block %d: %w: checksum mismatch", s.id, i, ErrCorrupt)
	}
	f := s.fetched.Add(s.blockSize)
	if s.opt.Progress != nil {
		s.opt.Progress(f, s.Allocated())
	}
	return buf, nil
}

func (s *Snapshot) putLocked(i int64, b []byte) {
	if _, ok := s.cache[i]; ok {
		return
	}
	s.cache[i] = s.lru.PushFront(&cached{index: i, data: b})
	for s.lru.Len() > s.opt.CacheBlocks {
		e := s.lru.Back()
		s.lru.Remove(e)
		delete(s.cache, e.Value.(*cached).index)
	}
}
