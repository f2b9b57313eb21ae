package cli

import (
	"os"
	"strconv"
	"time"
)

// generatedAt is the time a report is stamped with (its "generated"
// field, from which rollout reports draw their trend): now, in UTC to the
// second, or SOURCE_DATE_EPOCH when set, the reproducible-builds
// convention, so a pipeline can make byte-identical reports.
func generatedAt() string {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(sec, 0).UTC().Format(time.RFC3339)
		}
	}
	return time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
}
