//go:build !amilint_guest

package target

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	sdkebs "github.com/aws/aws-sdk-go-v2/service/ebs"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/amilint/amilint/internal/image/ebs"
)

// openAWS opens `ami:ami-…` and `ebs:snap-…` targets: the snapshot is read
// block by block through the EBS direct APIs, with region and credentials
// from the standard AWS chain (environment, shared config, IMDS), and then
// read as a disk image like any other. ok is false for other specs.
func openAWS(ctx context.Context, spec string, opt Options) (im *Image, ok bool, err error) {
	var kind, id string
	switch {
	case strings.HasPrefix(spec, AMIPrefix):
		kind, id = "ami", strings.TrimPrefix(spec, AMIPrefix)
	case strings.HasPrefix(spec, EBSPrefix):
		kind, id = "ebs", strings.TrimPrefix(spec, EBSPrefix)
	default:
		return nil, false, nil
	}
	if id == "" {
		return nil, true, fmt.Errorf("open target %s: missing id", spec)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, true, fmt.Errorf("open target %s: load AWS configuration: %w", spec, err)
	}
	snapID := id
	if kind == "ami" {
		snapID, err = ebs.RootSnapshot(ctx, ec2.NewFromConfig(cfg), id)
		if err != nil {
			return nil, true, fmt.Errorf("open target %s: %w", spec, err)
		}
	}
	snap, err := ebs.Open(ctx, sdkebs.NewFromConfig(cfg), snapID, ebs.Options{Progress: opt.Progress})
	if err != nil {
		return nil, true, fmt.Errorf("open target %s: %w", spec, err)
	}
	im, err = OpenDisk(spec, snap, snap.Size(), opt)
	if err != nil {
		snap.Close()
		return nil, true, err
	}
	// Closing the image stops the snapshot's reads ahead still in flight.
	im.closer = closers{im.closer, snap}
	im.Kind = kind
	im.FS = im.FS.Remote()
	im.Detail = "EBS snapshot " + snapID + ", " + im.Detail
	im.counter = fetched{snap}
	return im, true, nil
}

// fetched reports a snapshot's fetched bytes as the bytes read.
type fetched struct{ s *ebs.Snapshot }

func (f fetched) Bytes() int64 { return f.s.Fetched() }
