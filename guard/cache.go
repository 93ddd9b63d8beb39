package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// cached is Options.CacheFile's content: the policy as the portal sent it,
// its ETag, and when it was fetched.
type cached struct {
	FetchedAt time.Time       `json:"fetched_at"`
	ETag      string          `json:"etag"`
	Policy    json.RawMessage `json:"policy"`
}

// saveCache writes the policy just installed to Options.CacheFile, through
// a file renamed into place so a crash never leaves half a policy.
func (g *Guard) saveCache(ctx context.Context, raw []byte, etag string) {
	if g.opts.CacheFile == "" {
		return
	}
	b, err := json.Marshal(cached{FetchedAt: time.Now().UTC(), ETag: etag, Policy: raw})
	if err == nil {
		err = writeFileAtomic(g.opts.CacheFile, b)
	}
	if err != nil {
		g.log.WarnContext(ctx, "sluice guard: cannot cache the policy on disk", "file", g.opts.CacheFile, "err", err)
	}
}

func writeFileAtomic(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// errCacheTooOld is loadCache's refusal of a policy past CacheMaxAge.
var errCacheTooOld = errors.New("the cached policy is older than CacheMaxAge")

// loadCache installs the policy of Options.CacheFile and returns its age.
func (g *Guard) loadCache() (time.Duration, error) {
	b, err := os.ReadFile(g.opts.CacheFile)
	if err != nil {
		return 0, err
	}
	var c cached
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("read %s: %w", g.opts.CacheFile, err)
	}
	age := time.Since(c.FetchedAt)
	if age > g.opts.CacheMaxAge {
		return age, fmt.Errorf("%w (%s old)", errCacheTooOld, age.Round(time.Second))
	}
	var doc policy.Document
	if err := json.Unmarshal(c.Policy, &doc); err != nil {
		return 0, fmt.Errorf("read %s: %w", g.opts.CacheFile, err)
	}
	if err := g.resolver.Install(doc); err != nil {
		return 0, fmt.Errorf("read %s: %w", g.opts.CacheFile, err)
	}
	g.mu.Lock()
	g.etag = c.ETag
	g.mu.Unlock()
	return age, nil
}
