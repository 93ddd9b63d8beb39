package users

import (
	"net/mail"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/pgtext"
)

// MinPasswordLen is the shortest password accepted, in characters.
const MinPasswordLen = 12

// FieldErrors maps a form or JSON field name ("email", "password", "role")
// to a message a user can act on. A nil or empty FieldErrors means valid.
type FieldErrors map[string]string

// Error lists the fields in a stable order, e.g.
// "email: is not a valid address; password: must be at least 12 characters".
func (fe FieldErrors) Error() string {
	keys := make([]string, 0, len(fe))
	for k := range fe {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(k + ": " + fe[k])
	}
	return b.String()
}

// orNil returns nil when there is nothing to report, so callers can write
// `if err := ValidateSignup(...); err != nil`.
func (fe FieldErrors) orNil() FieldErrors {
	if len(fe) == 0 {
		return nil
	}
	return fe
}

// ValidateSignup checks a sign-up form: email must be one well-formed address
// (no display name, at most 254 characters), the password at least
// MinPasswordLen characters, at most 1024 bytes, and not easy to guess: not
// the email, not one character or a short pattern repeated, not a run of
// keys, not on the list of common and breached passwords shipped with the
// binary, nor such a password with digits or symbols added.
// It returns nil when both are acceptable.
func ValidateSignup(email, password string) FieldErrors {
	fe := FieldErrors{}
	if msg := checkEmail(email); msg != "" {
		fe["email"] = msg
	}
	if msg := checkPassword(email, password); msg != "" {
		fe["password"] = msg
	}
	return fe.orNil()
}

// ValidateEmail returns what is wrong with email as an account address
// (the rule ValidateSignup applies), or "" when it is acceptable.
func ValidateEmail(email string) string {
	return checkEmail(email)
}

func checkEmail(email string) string {
	if email == "" {
		return "is required"
	}
	if msg := pgtext.Problem(email); msg != "" {
		return msg
	}
	if len(email) > 254 {
		return "must be at most 254 characters"
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" {
		return "is not a valid address (expected name@example.com)"
	}
	return ""
}

func checkPassword(email, password string) string {
	if password == "" {
		return "is required"
	}
	if utf8.RuneCountInString(password) < MinPasswordLen {
		return "must be at least 12 characters"
	}
	if len(password) > maxPasswordBytes {
		return "must be at most 1024 bytes"
	}
	return weakness(email, password)
}
