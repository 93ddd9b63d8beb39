package web

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/static"
)

const staticPrefix = "/static/"

// asset is one embedded file, kept in memory as is and gzipped.
type asset struct {
	body, gz    []byte
	contentType string
}

// loadAssets reads every embedded asset and compresses it once, at start,
// so a first page load fetches about a third of the bytes.
func loadAssets() map[string]asset {
	out := map[string]asset{}
	entries, err := fs.ReadDir(static.FS, ".")
	if err != nil {
		panic("web: read embedded assets: " + err.Error())
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		body, err := fs.ReadFile(static.FS, e.Name())
		if err != nil {
			panic("web: read embedded asset: " + err.Error())
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[e.Name()] = asset{body: body, gz: buf.Bytes(), contentType: ct}
	}
	return out
}

// staticHandler serves the embedded assets. Every asset's name carries its
// version, so browsers may keep it for a year without asking again.
func staticHandler() http.Handler {
	assets := loadAssets()
	// The binary's assets never change while it runs; one modification
	// time lets If-Modified-Since work across requests.
	started := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.PathValue("file")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		h.Set("Content-Type", a.contentType)
		h.Add("Vary", "Accept-Encoding")
		body := a.body
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = a.gz
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		http.ServeContent(w, r, "", started, bytes.NewReader(body))
	})
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
