package server

import (
	"net/url"
	"time"

	"github.com/strata-mq/strata/lib/serve"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
)

// Default addresses: tiering at P+3 and the embedded S3 at P+4 of the dev
// base port 9092.
const (
	DefaultListen = "127.0.0.1:9095"
)

// Config is the tiering service's configuration.
type Config struct {
	serve.Base
	// S3Endpoint is the S3 API base URL (--s3-endpoint). Empty means AWS
	// S3 for S3Region, or the embedded server when EmbeddedS3Listen is set.
	S3Endpoint string
	// S3Region is the signing region (--s3-region). Default us-east-1.
	S3Region string
	// S3Bucket is the bucket (--s3-bucket). Default "strata".
	S3Bucket string
	// S3Prefix is the key prefix of every object (--s3-prefix). Default
	// "strata".
	S3Prefix string
	// S3AccessKey and S3SecretKey are static credentials; both empty use
	// the AWS default chain (--s3-access-key, --s3-secret-key).
	S3AccessKey, S3SecretKey string
	// S3PathStyle addresses buckets by path (--s3-path-style); MinIO, Ceph
	// and the embedded server need it. Default false, true with the
	// embedded server.
	S3PathStyle bool
	// S3CreateBucket creates the bucket at start when missing
	// (--s3-create-bucket). Default false, true with the embedded server.
	S3CreateBucket bool
	// EmbeddedS3Listen, when set, serves an embedded S3-compatible server
	// (gofakes3 on EmbeddedS3Dir) on this address in this process
	// (--embedded-s3-listen).
	EmbeddedS3Listen string
	// EmbeddedS3Dir holds the embedded server's objects (--embedded-s3-dir).
	EmbeddedS3Dir string
	// Controller is a comma-separated list of controller URLs for topic
	// metadata (--controller). Either this or Gateway; empty both means no
	// metadata: topics are known only from the bucket and total retention
	// does not run.
	Controller string
	// Gateway is a gateway URL for topic metadata (--gateway).
	Gateway string
	// SpoolDir holds uploads while they are verified (--spool-dir).
	// Default the system temporary directory.
	SpoolDir string
	// CacheBytes bounds the read cache (--cache-bytes). Default 256 MiB.
	CacheBytes int64
	// RetentionInterval is how often total retention and garbage
	// collection of unreferenced objects run (--retention-interval).
	// Default 1 minute.
	RetentionInterval time.Duration
	// OrphanGrace is how old an object no manifest names must be before
	// it is deleted (--orphan-grace). Default 1 hour.
	OrphanGrace time.Duration
	// CompactionInterval is how often tiered objects are compacted
	// (--compaction-interval): small adjacent objects merged, and
	// cleanup.policy=compact topics key-compacted. Default 10 minutes; 0
	// disables compaction.
	CompactionInterval time.Duration
	// CompactionMinObjectBytes: objects below this size are merged with
	// their neighbours (--compaction-min-object-bytes). Default 8 MiB.
	CompactionMinObjectBytes int64
	// CompactionMaxObjectBytes bounds the objects compaction writes
	// (--compaction-max-object-bytes). Default 256 MiB.
	CompactionMaxObjectBytes int64
	// TombstoneRetention is how long key compaction keeps a tombstone
	// after its batch's max timestamp, for topics whose configs lack
	// delete.retention.ms (--tombstone-retention). Default 24 hours. The
	// controller sends every topic's effective delete.retention.ms, so
	// this is the fallback for a controller that does not.
	TombstoneRetention time.Duration
	// FaultUploadDelay, for fault tests only, delays each upload of a
	// segment's .log object by this long (--fault-upload-delay), through
	// objstore.Faulty. Default 0: no fault wrapper at all.
	FaultUploadDelay time.Duration
	// FaultUploadCount limits FaultUploadDelay to the first this many .log
	// uploads (--fault-upload-count). Default 0: every one.
	FaultUploadCount int
}

func (c *Config) RegisterFlags(f *serve.Flags) {
	f.StringVar(&c.S3Endpoint, "s3-endpoint", "", "S3 API base URL (MinIO, R2, Ceph, ...); empty means AWS S3, or the embedded server with --embedded-s3-listen")
	f.StringVar(&c.S3Region, "s3-region", "us-east-1", "S3 signing region")
	f.StringVar(&c.S3Bucket, "s3-bucket", "strata", "bucket holding the tiered segments and manifests")
	f.StringVar(&c.S3Prefix, "s3-prefix", "strata", "key prefix of every object in the bucket")
	f.StringVar(&c.S3AccessKey, "s3-access-key", "", "S3 access key id; empty (with no secret) uses the AWS default credential chain")
	f.SecretVar(&c.S3SecretKey, "s3-secret-key", "", "S3 secret access key")
	f.BoolVar(&c.S3PathStyle, "s3-path-style", false, "address the bucket as ENDPOINT/BUCKET (MinIO, Ceph, the embedded server)")
	f.BoolVar(&c.S3CreateBucket, "s3-create-bucket", false, "create the bucket at start when it does not exist")
	f.StringVar(&c.EmbeddedS3Listen, "embedded-s3-listen", "", "also serve an embedded S3-compatible server on this address (dev and tests)")
	f.StringVar(&c.EmbeddedS3Dir, "embedded-s3-dir", "", "directory holding the embedded S3 server's objects")
	f.StringVar(&c.Controller, "controller", "", "controller base URLs, comma-separated, for topic metadata")
	f.StringVar(&c.Gateway, "gateway", "", "gateway base URL for topic metadata, when --controller is not given")
	f.StringVar(&c.SpoolDir, "spool-dir", "", "directory for uploads being verified; default the system temporary directory")
	f.Int64Var(&c.CacheBytes, "cache-bytes", 256<<20, "bytes of tiered data cached for reads")
	f.DurationVar(&c.RetentionInterval, "retention-interval", time.Minute, "how often total retention and object garbage collection run")
	f.DurationVar(&c.OrphanGrace, "orphan-grace", time.Hour, "age after which an object no manifest names is deleted")
	f.DurationVar(&c.CompactionInterval, "compaction-interval", 10*time.Minute, "how often tiered objects are merged and compact topics key-compacted; 0 disables")
	f.Int64Var(&c.CompactionMinObjectBytes, "compaction-min-object-bytes", compactor.DefaultMinObjectBytes, "tiered objects below this size are merged with adjacent ones")
	f.Int64Var(&c.CompactionMaxObjectBytes, "compaction-max-object-bytes", compactor.DefaultMaxObjectBytes, "largest object compaction writes (bound on a run's total size)")
	f.DurationVar(&c.TombstoneRetention, "tombstone-retention", compactor.DefaultTombstoneRetention, "how long key compaction keeps a tombstone after its batch's max timestamp, unless the topic sets delete.retention.ms")
	f.DurationVar(&c.FaultUploadDelay, "fault-upload-delay", 0, "fault tests only: delay each segment .log upload by this long")
	f.IntVar(&c.FaultUploadCount, "fault-upload-count", 0, "fault tests only: apply --fault-upload-delay to the first this many uploads; 0 means all")
}

func (c *Config) Validate() error {
	var p serve.Problems
	if c.S3Bucket == "" {
		p.Flag("s3-bucket", c.S3Bucket, "must not be empty")
	}
	if c.S3Endpoint != "" {
		if u, err := url.Parse(c.S3Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Flag("s3-endpoint", c.S3Endpoint, "must be an http:// or https:// URL")
		}
	}
	if (c.S3AccessKey == "") != (c.S3SecretKey == "") {
		p.Flag("s3-access-key", c.S3AccessKey, "give both --s3-access-key and --s3-secret-key, or neither")
	}
	if c.EmbeddedS3Listen != "" {
		if err := serve.CheckListenAddr(c.EmbeddedS3Listen); err != nil {
			p.Flag("embedded-s3-listen", c.EmbeddedS3Listen, err.Error())
		}
		if c.EmbeddedS3Dir == "" {
			p.Flag("embedded-s3-dir", c.EmbeddedS3Dir, "required with --embedded-s3-listen")
		}
	}
	if c.Controller != "" && c.Gateway != "" {
		p.Flag("gateway", c.Gateway, "give --controller or --gateway, not both")
	}
	if _, err := serve.ParseURLs(c.Controller); err != nil {
		p.Flag("controller", c.Controller, err.Error())
	}
	if _, err := serve.ParseURLs(c.Gateway); err != nil {
		p.Flag("gateway", c.Gateway, err.Error())
	}
	if c.CacheBytes <= 0 {
		p.Flag("cache-bytes", c.CacheBytes, "must be positive")
	}
	if c.RetentionInterval <= 0 {
		p.Flag("retention-interval", c.RetentionInterval, "must be positive")
	}
	if c.CompactionInterval < 0 {
		p.Flag("compaction-interval", c.CompactionInterval, "must not be negative (0 disables compaction)")
	}
	if c.CompactionMinObjectBytes <= 0 {
		p.Flag("compaction-min-object-bytes", c.CompactionMinObjectBytes, "must be positive")
	}
	if c.CompactionMaxObjectBytes < c.CompactionMinObjectBytes {
		p.Flag("compaction-max-object-bytes", c.CompactionMaxObjectBytes, "must be at least --compaction-min-object-bytes")
	}
	if c.TombstoneRetention < 0 {
		p.Flag("tombstone-retention", c.TombstoneRetention, "must not be negative")
	}
	if c.FaultUploadDelay < 0 {
		p.Flag("fault-upload-delay", c.FaultUploadDelay, "must not be negative")
	}
	if c.FaultUploadCount < 0 {
		p.Flag("fault-upload-count", c.FaultUploadCount, "must not be negative")
	}
	if c.OrphanGrace <= 0 {
		p.Flag("orphan-grace", c.OrphanGrace, "must be positive")
	}
	return p.Err()
}
