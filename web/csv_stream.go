package web

import (
	"encoding/csv"
	"net/http"
)

// streamCSV answers a CSV download named filename: header, then the rows
// each hands to its write as it reads them. When each fails before a row
// is out (csv.Writer buffers 4 KB before its first write) the answer is
// the error instead; after, the download ends short and the log says why.
func (s *Server) streamCSV(w http.ResponseWriter, r *http.Request, filename string, header []string, each func(write func([]string) error) error) {
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	cw := csv.NewWriter(w)
	_ = cw.Write(header)
	rows := 0
	err := each(func(row []string) error {
		rows++
		return cw.Write(row)
	})
	if err != nil && rows == 0 && r.Context().Err() == nil {
		h.Del("Content-Disposition")
		s.error(w, r, err)
		return
	}
	cw.Flush()
	if err == nil {
		err = cw.Error()
	}
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("CSV download cut short", "file", filename, "err", err, "rows", rows)
	}
}
