package llm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// retryDoer retries a request on 429, 5xx and network errors, with
// exponential backoff and jitter, waiting at least what Retry-After asks.
type retryDoer struct {
	client     *http.Client
	maxRetries int
	sleep      func(context.Context, time.Duration) error
}

const (
	baseBackoff = 250 * time.Millisecond
	maxBackoff  = 30 * time.Second
)

func (d *retryDoer) Do(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = body
		}
		resp, err := d.client.Do(req)
		retryable := err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		if !retryable || attempt >= d.maxRetries || req.Context().Err() != nil {
			return resp, err
		}
		wait := backoff(attempt)
		if resp != nil {
			if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok && ra > wait {
				wait = ra
			}
			resp.Body.Close()
		}
		if err := d.sleep(req.Context(), min(wait, maxBackoff)); err != nil {
			return nil, fmt.Errorf("retry cancelled: %w", err)
		}
	}
}

// backoff is base·2^attempt with ±50% jitter, so clients hitting the same
// limit do not retry in step.
func backoff(attempt int) time.Duration {
	d := baseBackoff << min(attempt, 8)
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
