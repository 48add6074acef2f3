// Package lambdainvoke calls the AWS Lambda Invoke API
// (POST /2015-03-31/functions/{name}/invocations) with a SigV4-signed
// request, resolving the endpoint, region and credentials from the
// environment the way the AWS SDKs do. It signs with the SDK's v4 signer
// alone: the SDK's Lambda client would add megabytes to the bootstraps
// (issue 10 keeps them under 10 MB).
//
// Waker builds the relay's wake-ups on it: coalesced asynchronous
// invocations of the next stage's function that never fail the caller.
package lambdainvoke

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Invocation types (the X-Amz-Invocation-Type header).
const (
	// Event queues the invocation and returns at once (202).
	Event = "Event"
	// RequestResponse runs the function and returns its response (200).
	RequestResponse = "RequestResponse"
)

// ErrConfig is matched by every error FromEnv returns.
var ErrConfig = errors.New("lambdainvoke: configuration")

// APIError is an error answer of the Invoke API, for example
// ResourceNotFoundException (404) or TooManyRequestsException (429).
type APIError struct {
	Status  int
	Type    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("lambda invoke: %d %s: %s", e.Status, e.Type, e.Message)
}

// Client invokes Lambda functions. It is safe for concurrent use.
type Client struct {
	endpoint *url.URL
	region   string
	creds    aws.Credentials
	signer   *v4.Signer
	hc       *http.Client
}

// FromEnv builds a Client from the standard AWS variables, as the SDKs
// resolve them:
//   - endpoint: AWS_ENDPOINT_URL_LAMBDA, else AWS_ENDPOINT_URL (both
//     ignored when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true), else
//     https://lambda.<region>.amazonaws.com (.com.cn in China regions);
//   - region: AWS_REGION, else AWS_DEFAULT_REGION (required);
//   - credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
//     AWS_SESSION_TOKEN, which Lambda sets to the function role's
//     temporary credentials (required).
//
// getenv is os.Getenv in production.
func FromEnv(getenv func(string) string) (*Client, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		return nil, fmt.Errorf("%w: AWS_REGION is not set", ErrConfig)
	}
	creds := aws.Credentials{
		AccessKeyID:     getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    getenv("AWS_SESSION_TOKEN"),
	}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		return nil, fmt.Errorf("%w: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set", ErrConfig)
	}
	raw := ""
	if !strings.EqualFold(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		raw = getenv("AWS_ENDPOINT_URL_LAMBDA")
		if raw == "" {
			raw = getenv("AWS_ENDPOINT_URL")
		}
	}
	if raw == "" {
		suffix := "amazonaws.com"
		if strings.HasPrefix(region, "cn-") {
			suffix = "amazonaws.com.cn"
		}
		raw = "https://lambda." + region + "." + suffix
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: Lambda endpoint %q is not an http(s) URL", ErrConfig, raw)
	}
	return &Client{endpoint: u, region: region, creds: creds, signer: v4.NewSigner(),
		hc: &http.Client{Timeout: 10 * time.Second}}, nil
}

// Region returns the region requests are signed for.
func (c *Client) Region() string { return c.region }

// Endpoint returns the endpoint requests go to.
func (c *Client) Endpoint() string { return c.endpoint.String() }

// Invoke calls function (a name, a partial ARN such as
// 123456789012:function:name, or a full ARN) with payload and the given
// invocation type (Event or RequestResponse), and returns the response
// payload (empty for Event). An error answer is an *APIError.
func (c *Client) Invoke(ctx context.Context, function, invocationType string, payload []byte) ([]byte, error) {
	if function == "" {
		return nil, errors.New("lambda invoke: no function name")
	}
	if payload == nil {
		payload = []byte("{}")
	}
	u := *c.endpoint
	// The name goes in one path segment; an ARN's colons are escaped as the
	// SDKs escape them, and the signer signs the escaped path.
	seg := url.PathEscape(function)
	seg = strings.ReplaceAll(seg, ":", "%3A")
	base := strings.TrimSuffix(u.Path, "/")
	u.Path = base + "/2015-03-31/functions/" + function + "/invocations"
	u.RawPath = base + "/2015-03-31/functions/" + seg + "/invocations"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("lambda invoke: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amz-Invocation-Type", invocationType)
	sum := sha256.Sum256(payload)
	if err := c.signer.SignHTTP(ctx, c.creds, req, hex.EncodeToString(sum[:]), "lambda", c.region, time.Now()); err != nil {
		return nil, fmt.Errorf("lambda invoke: sign: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lambda invoke %s: %w", function, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 6<<20)) // Lambda's synchronous payload limit
	if err != nil {
		return nil, fmt.Errorf("lambda invoke %s: read response: %w", function, err)
	}
	if resp.StatusCode >= 300 {
		return nil, apiError(resp, body)
	}
	return body, nil
}

// apiError decodes an error answer: the type from X-Amzn-ErrorType (its
// part before a colon) or the body's "Type"/"__type", the message from
// "Message" or "message".
func apiError(resp *http.Response, body []byte) *APIError {
	var b struct {
		Type     string `json:"Type"`
		TypeAlt  string `json:"__type"`
		Message  string `json:"Message"`
		Message2 string `json:"message"`
	}
	_ = json.Unmarshal(body, &b)
	e := &APIError{Status: resp.StatusCode, Message: b.Message}
	if e.Message == "" {
		e.Message = b.Message2
	}
	e.Type, _, _ = strings.Cut(resp.Header.Get("X-Amzn-ErrorType"), ":")
	if e.Type == "" {
		e.Type = b.TypeAlt
	}
	if e.Type == "" {
		e.Type = b.Type
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}
