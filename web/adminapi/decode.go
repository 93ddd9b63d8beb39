package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// maxBodyBytes bounds every request body. The largest legitimate body, a
// plan with a few dozen tiers, is a few KiB.
const maxBodyBytes = 64 << 10

// requestError is a problem with the request itself (its framing, media
// type or JSON), answered with its own status and never logged as internal.
type requestError struct {
	status int
	typ    string
	title  string
	detail string
	fields []FieldError
}

func (e *requestError) Error() string { return e.title + ": " + e.detail }

func (e *requestError) problem() Problem {
	return Problem{Type: e.typ, Title: e.title, Status: e.status, Detail: e.detail, Errors: e.fields}
}

// decodeJSON reads one JSON object from the body into dst. It refuses a
// media type other than JSON (415), a body over maxBodyBytes (413), unknown
// fields, wrong types, malformed or empty JSON, strings with invalid UTF-8
// or NUL bytes, and anything after the object (400), each with a detail
// naming what is wrong.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != jsonContentType {
		return &requestError{
			status: http.StatusUnsupportedMediaType, typ: typeUnsupportedMedia,
			title:  "Unsupported media type",
			detail: fmt.Sprintf("Content-Type must be application/json, not %q", ct),
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err)
	}
	// Text Postgres cannot store is refused here, naming the field, before
	// encoding/json would silently replace invalid UTF-8 and before any
	// query could fail on a NUL byte.
	if fields := textProblems(raw); len(fields) > 0 {
		return malformed("text fields must be valid UTF-8 without NUL bytes", fields)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	// A second value, even valid JSON, means the client sent something other
	// than what it believes; refuse rather than silently ignore it.
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return decodeError(err)
		}
		return malformed("the body must hold a single JSON object, with nothing after it", nil)
	}
	return nil
}

func malformed(detail string, fields []FieldError) *requestError {
	return &requestError{
		status: http.StatusBadRequest, typ: typeMalformed,
		title: "Malformed request", detail: detail, fields: fields,
	}
}

func decodeError(err error) error {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		tooLarge  *http.MaxBytesError
		unknownPf = "json: unknown field "
	)
	switch {
	case errors.As(err, &tooLarge):
		return &requestError{
			status: http.StatusRequestEntityTooLarge, typ: typeTooLarge,
			title:  "Request too large",
			detail: fmt.Sprintf("the body must be at most %d bytes", tooLarge.Limit),
		}
	case errors.Is(err, io.EOF):
		return malformed("the body is empty; it must be a JSON object", nil)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("the body ends in the middle of a JSON value", nil)
	case errors.As(err, &syntax):
		return malformed(fmt.Sprintf("the body is not valid JSON (at byte %d)", syntax.Offset), nil)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return malformed("the body must be a JSON object", nil)
		}
		msg := "must be " + jsonKind(typeErr.Type.Kind().String())
		return malformed(fmt.Sprintf("field %q %s, not %s", field, msg, typeErr.Value),
			[]FieldError{{Field: field, Message: msg}})
	case strings.HasPrefix(err.Error(), unknownPf):
		// encoding/json has no typed error for unknown fields; its message
		// format has been stable since DisallowUnknownFields appeared.
		field := strings.Trim(strings.TrimPrefix(err.Error(), unknownPf), `"`)
		return malformed(fmt.Sprintf("unknown field %q", field),
			[]FieldError{{Field: field, Message: "is not a known field"}})
	default:
		return malformed("the body could not be read as JSON", nil)
	}
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	default:
		return "a value of the right type"
	}
}
