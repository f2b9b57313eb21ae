// Package ebstest is a fake of the EBS direct APIs and of EC2's
// DescribeImages, served over HTTP on loopback for tests. It checks every
// request's SigV4 signature against the test credentials, paginates block
// listings, hands out per-block tokens, and can throttle or fail blocks.
// It listens on loopback only and never calls AWS.
package ebstest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/sys/unix"
)

// Test credentials the server accepts.
const (
	AccessKey = "AKIDAMILINTTEST"
	SecretKey = "amilint-test-secret-key"
	Region    = "us-east-1"
	BlockSize = 512 << 10
)

// Snapshot is a volume image served as a snapshot: all-zero blocks are not
// listed, as EBS omits blocks never written. The volume is Data, or File
// of Size bytes (a sparse file of gigabytes, read only where it holds
// data).
type Snapshot struct {
	Data []byte
	File io.ReaderAt
	Size int64
}

func (s Snapshot) size() int64 {
	if s.File != nil {
		return s.Size
	}
	return int64(len(s.Data))
}

// read copies the volume's bytes at off into p (zeros past its end).
func (s Snapshot) read(p []byte, off int64) {
	clear(p)
	if off >= s.size() {
		return
	}
	if s.File == nil {
		copy(p, s.Data[off:])
		return
	}
	n := min(int64(len(p)), s.Size-off)
	s.File.ReadAt(p[:n], off)
}

// Image is an AMI whose root device is backed by a snapshot.
type Image struct {
	RootDevice string
	SnapshotID string
	// Others are further block device mappings: device name to an EBS
	// snapshot id, "" for a new empty EBS volume, or "ephemeralN" for an
	// instance-store volume.
	Others map[string]string
}

// Server is the fake. Configure it before the first request.
type Server struct {
	Snapshots map[string]Snapshot
	Images    map[string]Image
	// PageSize caps blocks per ListSnapshotBlocks page (default 3, to
	// exercise pagination).
	PageSize int
	// ThrottleFirst throttles the first N GetSnapshotBlock calls per block.
	ThrottleFirst int
	// FailBlocks always fail with a 500.
	FailBlocks map[int]bool
	// CorruptBlocks are served with a wrong checksum.
	CorruptBlocks map[int]bool
	// UncheckedBlocks are served without a checksum.
	UncheckedBlocks map[int]bool
	// Latency delays every response, as a region's round trip does.
	Latency time.Duration

	srv *httptest.Server

	mu        sync.Mutex
	attempts  map[string]int
	allocated map[string][]int // snapshot -> its non-zero blocks, found once
	inFlight  int
	Requests  int
	Fetched   int
	BadSigned int
	// MaxInFlight is the most GetSnapshotBlock calls served at once.
	MaxInFlight int
	// answered is the longest chain (see Rounds) of the requests answered
	// so far; rounds of all requests.
	answered, rounds int
}

// Rounds returns the longest chain of requests each made after the one
// before it in the chain was answered: how many round trips the client
// waited for one after another (those it made side by side count once).
// It bounds the dependent round trips of a fetch from above: two requests
// in a chain may be in order by chance, not because the second needed
// the first's answer. With a latency much longer than the client's own
// work, the wall time is about Rounds × Latency.
func (s *Server) Rounds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds
}

// Counts returns the requests served, the blocks fetched and the most
// block fetches served at once, read under the server's lock.
func (s *Server) Counts() (requests, fetched, maxInFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Requests, s.Fetched, s.MaxInFlight
}

// BadSignatures returns how many requests carried a wrong SigV4
// signature, read under the server's lock.
func (s *Server) BadSignatures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BadSigned
}

// Start serves on 127.0.0.1 and returns the base URL. Close stops it.
func (s *Server) Start() string {
	if s.PageSize == 0 {
		s.PageSize = 3
	}
	s.attempts = map[string]int{}
	// Each snapshot's blocks are listed now (reading a sparse file only
	// where it has data): no request, and no client's timing, pays for it.
	for id, snap := range s.Snapshots {
		s.allocatedBlocks(id, snap)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("ebstest: listen on loopback: %v", err))
	}
	s.srv.Listener = l
	s.srv.Start()
	return s.srv.URL
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

var blockPath = regexp.MustCompile(`^/snapshots/([^/]+)/blocks(?:/(\d+))?$`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.Requests++
	round := s.answered + 1
	s.mu.Unlock()
	if s.Latency > 0 {
		t := time.NewTimer(s.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	// Answered from here on: recorded before any byte of the response is
	// written, so a request made on its answer sees it.
	s.mu.Lock()
	s.answered = max(s.answered, round)
	s.rounds = max(s.rounds, round)
	s.mu.Unlock()
	service := "ebs"
	if r.Method == http.MethodPost && r.URL.Path == "/" {
		service = "ec2"
	}
	if err := verify(r, body, service); err != nil {
		s.mu.Lock()
		s.BadSigned++
		s.mu.Unlock()
		writeErr(w, http.StatusForbidden, "AccessDeniedException", err.Error())
		return
	}
	if service == "ec2" {
		s.describeImages(w, body)
		return
	}
	m := blockPath.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodGet {
		writeErr(w, http.StatusNotFound, "ResourceNotFoundException", "no such operation")
		return
	}
	snap, ok := s.Snapshots[m[1]]
	if !ok {
		writeErr(w, http.StatusNotFound, "ResourceNotFoundException", "snapshot "+m[1]+" not found")
		return
	}
	if m[2] == "" {
		s.list(w, r, m[1], snap)
		return
	}
	idx, _ := strconv.Atoi(m[2])
	s.block(w, r, m[1], snap, idx)
}

func nonZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return true
		}
	}
	return false
}

func token(id string, idx int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", id, idx)))
	return "tok-" + hex.EncodeToString(sum[:8])
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, id string, snap Snapshot) {
	start := 0
	if t := r.URL.Query().Get("pageToken"); t != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(t, "page-"))
		if err != nil {
			writeErr(w, http.StatusBadRequest, "ValidationException", "bad page token")
			return
		}
		start = n
	}
	limit := s.PageSize
	if mr, err := strconv.Atoi(r.URL.Query().Get("maxResults")); err == nil && mr < limit {
		limit = mr
	}
	type block struct {
		BlockIndex int32
		BlockToken string
	}
	blocks := []block{}
	alloc := s.allocatedBlocks(id, snap)
	j, _ := slices.BinarySearch(alloc, start)
	for ; j < len(alloc) && len(blocks) < limit; j++ {
		blocks = append(blocks, block{int32(alloc[j]), token(id, alloc[j])})
	}
	out := map[string]any{
		"Blocks":     blocks,
		"BlockSize":  BlockSize,
		"VolumeSize": (snap.size() + (1 << 30) - 1) >> 30,
		"ExpiryTime": float64(time.Now().Add(time.Hour).Unix()),
	}
	if j < len(alloc) {
		out["NextToken"] = fmt.Sprintf("page-%d", alloc[j])
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// allocatedBlocks lists the blocks of snap that hold a non-zero byte,
// once per snapshot: a sparse file is read only where it has data.
func (s *Server) allocatedBlocks(id string, snap Snapshot) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.allocated[id]; ok {
		return a
	}
	if s.allocated == nil {
		s.allocated = map[string][]int{}
	}
	var out []int
	buf := make([]byte, BlockSize)
	nblocks := int((snap.size() + BlockSize - 1) / BlockSize)
	for i := 0; i < nblocks; i++ {
		if f, ok := snap.File.(*os.File); ok {
			// Skip holes: the next data at or after this block.
			next, err := unix.Seek(int(f.Fd()), int64(i)*BlockSize, unix.SEEK_DATA)
			if err != nil || next >= snap.Size {
				break
			}
			i = int(next / BlockSize)
		}
		snap.read(buf, int64(i)*BlockSize)
		if nonZero(buf) {
			out = append(out, i)
		}
	}
	s.allocated[id] = out
	return out
}

func (s *Server) block(w http.ResponseWriter, r *http.Request, id string, snap Snapshot, idx int) {
	if r.URL.Query().Get("blockToken") != token(id, idx) {
		writeErr(w, http.StatusBadRequest, "ValidationException", "bad block token")
		return
	}
	key := fmt.Sprintf("%s/%d", id, idx)
	s.mu.Lock()
	s.attempts[key]++
	n := s.attempts[key]
	s.mu.Unlock()
	if n <= s.ThrottleFirst {
		writeErr(w, http.StatusTooManyRequests, "RequestThrottledException", "rate exceeded")
		return
	}
	if s.FailBlocks[idx] {
		writeErr(w, http.StatusInternalServerError, "InternalServerException", "block unavailable")
		return
	}
	s.mu.Lock()
	s.inFlight++
	s.MaxInFlight = max(s.MaxInFlight, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	data := make([]byte, BlockSize)
	snap.read(data, int64(idx)*BlockSize)
	sum := sha256.Sum256(data)
	if s.CorruptBlocks[idx] {
		sum[0] ^= 0xff
	}
	s.mu.Lock()
	s.Fetched++
	s.mu.Unlock()
	if !s.UncheckedBlocks[idx] {
		w.Header().Set("x-amz-Checksum", base64.StdEncoding.EncodeToString(sum[:]))
		w.Header().Set("x-amz-Checksum-Algorithm", "SHA256")
	}
	w.Header().Set("x-amz-Data-Length", strconv.Itoa(BlockSize))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

func (s *Server) describeImages(w http.ResponseWriter, body []byte) {
	q, _ := url.ParseQuery(string(body))
	if q.Get("Action") != "DescribeImages" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := q.Get("ImageId.1")
	var items string
	if im, ok := s.Images[id]; ok {
		var others strings.Builder
		for _, dev := range slices.Sorted(maps.Keys(im.Others)) {
			switch v := im.Others[dev]; {
			case strings.HasPrefix(v, "ephemeral"):
				fmt.Fprintf(&others, `<item><deviceName>%s</deviceName><virtualName>%s</virtualName></item>`, dev, v)
			case v == "":
				fmt.Fprintf(&others, `<item><deviceName>%s</deviceName><ebs><volumeSize>8</volumeSize></ebs></item>`, dev)
			default:
				fmt.Fprintf(&others, `<item><deviceName>%s</deviceName><ebs><snapshotId>%s</snapshotId><volumeSize>8</volumeSize></ebs></item>`, dev, v)
			}
		}
		items = fmt.Sprintf(`<item><imageId>%s</imageId><rootDeviceName>%s</rootDeviceName><rootDeviceType>ebs</rootDeviceType>`+
			`<blockDeviceMapping><item><deviceName>%s</deviceName><ebs><snapshotId>%s</snapshotId><volumeSize>1</volumeSize></ebs></item>%s</blockDeviceMapping></item>`,
			id, im.RootDevice, im.RootDevice, im.SnapshotID, others.String())
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-1</requestId><imagesSet>%s</imagesSet></DescribeImagesResponse>`, items)
}

func writeErr(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-amzn-ErrorType", typ)
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg, "Message": msg})
}

var credRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$`)

// verify recomputes the request's SigV4 signature with the test secret.
func verify(r *http.Request, body []byte, service string) error {
	m := credRe.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return fmt.Errorf("missing or malformed SigV4 Authorization header")
	}
	if m[1] != AccessKey || m[3] != Region || m[4] != service {
		return fmt.Errorf("credential scope %s/%s/%s not accepted", m[1], m[3], m[4])
	}
	t, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("bad X-Amz-Date: %w", err)
	}
	req, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range strings.Split(m[5], ";") {
		if h == "host" {
			continue
		}
		req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	creds := aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, payload, service, Region, t); err != nil {
		return err
	}
	want := credRe.FindStringSubmatch(req.Header.Get("Authorization"))
	if want == nil || want[6] != m[6] {
		return fmt.Errorf("signature does not match")
	}
	return nil
}
