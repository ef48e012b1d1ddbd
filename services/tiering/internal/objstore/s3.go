package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Config configures an S3 bucket. Only Bucket is required; the zero
// values of the others select AWS defaults.
type S3Config struct {
	// Endpoint is the base URL of an S3-compatible service (MinIO, R2,
	// Ceph, the embedded server). Empty means AWS S3 for Region.
	Endpoint string
	// Region is the signing region. Default "us-east-1".
	Region string
	// Bucket is the bucket name. Required.
	Bucket string
	// AccessKey and SecretKey are static credentials. Both empty means the
	// AWS default credential chain (environment, shared config, IMDS).
	AccessKey, SecretKey string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY instead of
	// BUCKET.ENDPOINT/KEY; MinIO, Ceph and the embedded server need it.
	PathStyle bool
	// PartSize is the multipart part size. Default 16 MiB, at least 5 MiB
	// (the S3 minimum).
	PartSize int64
	// MultipartThreshold is the object size above which Upload goes
	// multipart. Default 32 MiB.
	MultipartThreshold int64
	// Concurrency is how many parts of one upload are in flight. Default 4.
	Concurrency int
	// MaxAttempts bounds the attempts of one request, with exponential
	// backoff between them (the SDK's standard retryer). Default 8.
	MaxAttempts int
	// MaxBackoff caps the wait between attempts. Default 5s.
	MaxBackoff time.Duration
	// HTTPClient carries the requests. Default a client of the SDK.
	HTTPClient *http.Client
	// CreateBucket creates the bucket at Open if it does not exist (dev and
	// tests). Default off.
	CreateBucket bool
}

// S3 is a Bucket on the S3 API.
type S3 struct {
	cfg    S3Config
	client *s3.Client
}

var _ Bucket = (*S3)(nil)

// OpenS3 validates cfg and returns the bucket. It checks that the bucket is
// reachable, creating it first when cfg.CreateBucket is set.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objstore: bucket name is empty")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = 16 << 20
	}
	if cfg.PartSize < 5<<20 {
		return nil, fmt.Errorf("objstore: part size %d is below the S3 minimum of 5 MiB", cfg.PartSize)
	}
	if cfg.MultipartThreshold == 0 {
		cfg.MultipartThreshold = 32 << 20
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
				// Tiering is a background job: never give up because a
				// client-side retry budget ran dry during an outage.
				o.RateLimiter = noRateLimit{}
			})
		}),
		// Several S3-compatible stores reject the SDK's default trailing
		// checksums; ask for checksums only where the API requires them.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: aws config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = cfg.PathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	b := &S3{cfg: cfg, client: client}
	_, err = client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)})
	if err != nil && cfg.CreateBucket && statusOf(err) == http.StatusNotFound {
		_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(cfg.Bucket)})
	}
	if err != nil {
		return nil, fmt.Errorf("objstore: bucket %q: %w", cfg.Bucket, err)
	}
	return b, nil
}

type noRateLimit struct{}

func (noRateLimit) GetToken(context.Context, uint) (func() error, error) {
	return func() error { return nil }, nil
}
func (noRateLimit) AddTokens(uint) error { return nil }

func statusOf(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// mapErr turns S3 errors into the package's sentinels, keeping the cause.
func mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	switch st := statusOf(err); {
	case errors.As(err, &nsk), errors.As(err, &nf), st == http.StatusNotFound:
		return fmt.Errorf("%w: %s %s", ErrNotFound, op, key)
	case st == http.StatusPreconditionFailed, st == http.StatusConflict:
		return fmt.Errorf("%w: %s %s: %w", ErrPrecondition, op, key, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, key, err)
}

func (b *S3) Upload(ctx context.Context, key string, r io.Reader, size int64) error {
	ra, isRA := r.(io.ReaderAt)
	if isRA && size > b.cfg.MultipartThreshold {
		return b.multipart(ctx, key, ra, size)
	}
	var body io.ReadSeeker
	switch {
	case isRA && size >= 0:
		body = io.NewSectionReader(ra, 0, size)
	default:
		// A body the SDK can rewind for its retries.
		data, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("objstore: upload %s: read: %w", key, err)
		}
		if int64(len(data)) > b.cfg.MultipartThreshold {
			return b.multipart(ctx, key, bytes.NewReader(data), int64(len(data)))
		}
		body, size = bytes.NewReader(data), int64(len(data))
	}
	_, err := b.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key), Body: body, ContentLength: aws.Int64(size),
	})
	return mapErr("upload", key, err)
}

// multipart uploads ra in parts, Concurrency at a time. A failure aborts
// the upload so no part lingers and no object appears.
func (b *S3) multipart(ctx context.Context, key string, ra io.ReaderAt, size int64) error {
	bucket := aws.String(b.cfg.Bucket)
	cr, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bucket, Key: aws.String(key)})
	if err != nil {
		return mapErr("create multipart upload", key, err)
	}
	abort := func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: bucket, Key: aws.String(key), UploadId: cr.UploadId})
	}
	nparts := int((size + b.cfg.PartSize - 1) / b.cfg.PartSize)
	parts := make([]types.CompletedPart, nparts)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, b.cfg.Concurrency)
	for i := range nparts {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			off := int64(i) * b.cfg.PartSize
			n := min(b.cfg.PartSize, size-off)
			num := int32(i + 1)
			out, err := b.client.UploadPart(pctx, &s3.UploadPartInput{
				Bucket: bucket, Key: aws.String(key), UploadId: cr.UploadId, PartNumber: aws.Int32(num),
				Body: io.NewSectionReader(ra, off, n), ContentLength: aws.Int64(n),
			})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = mapErr(fmt.Sprintf("upload part %d of", num), key, err)
				}
				mu.Unlock()
				cancel()
				return
			}
			parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("objstore: upload %s: %w", key, ctx.Err())
	}
	if firstErr != nil {
		abort()
		return firstErr
	}
	_, err = b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: bucket, Key: aws.String(key), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		abort()
		return mapErr("complete multipart upload", key, err)
	}
	return nil
}

func (b *S3) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, fmt.Errorf("objstore: get %s: negative offset %d", key, off)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)}
	switch {
	case length == 0:
		return io.NopCloser(bytes.NewReader(nil)), b.existsOrNotFound(ctx, key)
	case length > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		if statusOf(err) == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, mapErr("get", key, err)
	}
	return out.Body, nil
}

func (b *S3) existsOrNotFound(ctx context.Context, key string) error {
	ok, err := b.Exists(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("%w: get %s", ErrNotFound, key)
	}
	return err
}

func (b *S3) Get(ctx context.Context, key string) ([]byte, string, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)})
	if err != nil {
		return nil, "", mapErr("get", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", fmt.Errorf("objstore: get %s: %w", key, err)
	}
	return data, aws.ToString(out.ETag), nil
}

func (b *S3) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	in := &s3.PutObjectInput{
		Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	}
	if ifMatch == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifMatch)
	}
	out, err := b.client.PutObject(ctx, in)
	if err != nil {
		return "", mapErr("conditional put", key, err)
	}
	if etag := aws.ToString(out.ETag); etag != "" {
		return etag, nil
	}
	h, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)})
	if err != nil {
		return "", mapErr("head", key, err)
	}
	return aws.ToString(h.ETag), nil
}

func (b *S3) Delete(ctx context.Context, key string) error {
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)})
	if err = mapErr("delete", key, err); errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

func (b *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: aws.String(b.cfg.Bucket), Prefix: aws.String(prefix)})
	var page []ObjectInfo
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return mapErr("list", prefix, err)
		}
		page = page[:0]
		for _, o := range out.Contents {
			key := aws.ToString(o.Key)
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			page = append(page, ObjectInfo{Key: key, Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)})
		}
		sort.Slice(page, func(i, j int) bool { return page[i].Key < page[j].Key })
		for _, o := range page {
			if err := fn(o); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *S3) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)})
	if err = mapErr("head", key, err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
