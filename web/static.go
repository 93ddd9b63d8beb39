package web

import (
	"io/fs"
	"net/http"
	"path"

	"github.com/sluicehq/sluice/static"
)

const staticPrefix = "/static/"

// staticHandler serves the embedded assets. Every asset's name carries its
// version, so browsers may keep it for a year without asking again.
func staticHandler() http.Handler {
	files := http.FileServerFS(static.FS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "" || path.Base(name) != name {
			http.NotFound(w, r)
			return
		}
		if _, err := fs.Stat(static.FS, name); err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}
