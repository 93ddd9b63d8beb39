package web

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/views"
)

// maxPlanFileForm bounds the upload form: the file itself plus the
// multipart framing and the other fields.
const maxPlanFileForm = planfile.MaxFileBytes + 64<<10

func (s *Server) planFiles() *planfile.Store {
	return planfile.ForService(s.deps.Pool, s.deps.Plans)
}

// plansSchema serves the plans file's JSON Schema, public, so editors can
// fetch it to complete and check files.
func (s *Server) plansSchema(w http.ResponseWriter, r *http.Request) {
	b := planfile.Schema()
	h := w.Header()
	h.Set("Content-Type", "application/schema+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}

func (s *Server) plansFilePage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, views.PlansFileView(s.page(r, "Plans as code", "plans"), views.PlansFilePage{}))
}

// plansFileExport downloads the plans file.
func (s *Server) plansFileExport(w http.ResponseWriter, r *http.Request) {
	format, err := planfile.ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		s.error(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	f, err := s.planFiles().Export(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	b, err := planfile.EncodeWithSchema(f, format, s.publicBase(r)+"/docs/plans.schema.json")
	if err != nil {
		s.error(w, r, err)
		return
	}
	ct := "application/yaml"
	if format == planfile.JSON {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="plans.%s"`, format))
	_, _ = w.Write(b)
}

// readPlanFileForm reads the uploaded file (or the pasted text) and the
// prune box, from a multipart or a urlencoded form.
func readPlanFileForm(w http.ResponseWriter, r *http.Request) (text string, prune bool, err error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxPlanFileForm)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		err = r.ParseMultipartForm(maxPlanFileForm)
	} else {
		err = r.ParseForm()
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return "", false, fmt.Errorf("plans file form: %w", err)
		}
		return "", false, fmt.Errorf("plans file form: %w: %w", errBadRequest, err)
	}
	text = r.PostFormValue("text")
	if f, _, ferr := r.FormFile("file"); ferr == nil {
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, planfile.MaxFileBytes+1))
		if err != nil {
			return "", false, fmt.Errorf("plans file upload: %w: %w", errBadRequest, err)
		}
		if len(b) > 0 {
			text = string(b)
		}
	}
	return text, r.PostFormValue("prune") != "", nil
}

// plansFilePreview shows what the uploaded file would change, with the
// form that applies exactly that diff.
func (s *Server) plansFilePreview(w http.ResponseWriter, r *http.Request) {
	text, prune, err := readPlanFileForm(w, r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v := views.PlansFilePage{Text: text, Prune: prune}
	s.planFileStep(w, r, &v, planfile.Options{Prune: prune, DryRun: true})
}

// plansFileApply applies the previewed file, provided nothing changed
// since the preview (its base).
func (s *Server) plansFileApply(w http.ResponseWriter, r *http.Request) {
	text, prune, err := readPlanFileForm(w, r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v := views.PlansFilePage{Text: text, Prune: prune}
	s.planFileStep(w, r, &v, planfile.Options{Prune: prune, Base: r.PostFormValue("base"), Actor: s.actor(r)})
}

func (s *Server) planFileStep(w http.ResponseWriter, r *http.Request, v *views.PlansFilePage, opts planfile.Options) {
	page := s.page(r, "Plans as code", "plans")
	status := http.StatusOK
	p, err := planfile.Decode("uploaded file", []byte(v.Text))
	var d planfile.Diff
	if err == nil {
		d, err = s.planFiles().Apply(r.Context(), p, opts)
		if errors.Is(err, planfile.ErrConflict) {
			// Show the diff as it now is, to review again.
			v.Conflict, status = true, http.StatusConflict
			d, err = s.planFiles().Diff(r.Context(), p, opts.Prune)
		}
	}
	var fe *planfile.Error
	switch {
	case errors.As(err, &fe):
		v.Problems = fe.Problems
		s.render(w, r, http.StatusUnprocessableEntity, views.PlansFileView(page, *v))
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	v.Diff = &d
	v.Applied = !opts.DryRun && !v.Conflict
	s.render(w, r, status, views.PlansFileView(page, *v))
}
