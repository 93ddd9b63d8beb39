package adminapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/pgtext"
)

// pathID parses a positive integer path wildcard such as {id}.
func pathID(r *http.Request, name string) (int64, error) {
	v := r.PathValue(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, malformed("the path's "+name+" must be a positive integer",
			[]FieldError{{Field: name, Message: "must be a positive integer"}})
	}
	return id, nil
}

// queryReader parses query parameters, collecting every bad one so the
// client learns all of them from one response.
type queryReader struct {
	q      url.Values
	fields []FieldError
}

func newQueryReader(r *http.Request) *queryReader {
	return &queryReader{q: r.URL.Query()}
}

func (qr *queryReader) bad(name, msg string) {
	qr.fields = append(qr.fields, FieldError{Field: name, Message: msg})
}

// str reads an optional text parameter; one that Postgres could not take
// (invalid UTF-8, a NUL byte) is a field error before any query.
func (qr *queryReader) str(name string) string {
	v := qr.q.Get(name)
	if msg := pgtext.Problem(v); msg != "" {
		qr.bad(name, msg)
		return ""
	}
	return v
}

// int64Range reads an optional integer within [lo, hi]; def when absent.
func (qr *queryReader) int64Range(name string, def, lo, hi int64) int64 {
	v := qr.q.Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		qr.bad(name, "must be an integer from "+strconv.FormatInt(lo, 10)+" to "+strconv.FormatInt(hi, 10))
		return def
	}
	return n
}

// oneOf reads an optional value that must be one of allowed.
func (qr *queryReader) oneOf(name string, allowed ...string) string {
	v := qr.q.Get(name)
	if v == "" {
		return ""
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	msg := "must be one of"
	for i, a := range allowed {
		if i > 0 {
			msg += ","
		}
		msg += " " + a
	}
	qr.bad(name, msg)
	return ""
}

// time reads an optional RFC 3339 timestamp.
func (qr *queryReader) time(name string) time.Time {
	v := qr.q.Get(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		qr.bad(name, "must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
		return time.Time{}
	}
	return t
}

// err returns the collected problems as a validation error, or nil.
func (qr *queryReader) err() error {
	if len(qr.fields) == 0 {
		return nil
	}
	return &validationError{fields: qr.fields}
}

// validationError is a request the admin API itself found invalid before
// reaching a domain package (a missing version, a bad query parameter).
type validationError struct{ fields []FieldError }

func (e *validationError) Error() string { return "invalid request" }

// requireVersion reports a missing or non-positive optimistic-concurrency
// version, which would otherwise read as "overwrite whatever is there".
func requireVersion(v int) error {
	if v < 1 {
		return &validationError{fields: []FieldError{{Field: "version", Message: "is required: send the version you read"}}}
	}
	return nil
}

// nullableID is a JSON field that distinguishes absent, null and a value, so
// that "plan_id": null (clear) is not confused with a forgotten field.
type nullableID struct {
	Set   bool
	Value *int64
}

// UnmarshalJSON records that the field was present; null leaves Value nil.
func (n *nullableID) UnmarshalJSON(b []byte) error {
	n.Set = true
	if string(b) == "null" {
		n.Value = nil
		return nil
	}
	var v int64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	n.Value = &v
	return nil
}
