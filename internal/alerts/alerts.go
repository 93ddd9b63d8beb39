// Package alerts warns developers before their limits bite: rules say which
// thresholds of a limit or quota matter (by default 80 % and 100 %, and "at
// this pace the quota runs out before it renews"), an Evaluator reads usage
// off the request path with the engine's Peek and records each crossing once
// per threshold and period in Postgres, and a Worker delivers the queued
// events to the developer's webhooks (HMAC-SHA256 signed, retried with
// exponential backoff) and, when the portal has SMTP, by email.
//
// Once per period across instances: a crossing is claimed by inserting a row
// keyed by (subject, limit, threshold, period start); only the evaluator
// whose insert lands enqueues deliveries, in the same transaction.
package alerts

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/egress"
)

// Errors callers tell apart.
var (
	// ErrNotFound is returned for a rule, webhook or delivery that does not
	// exist or belongs to another developer.
	ErrNotFound = errors.New("alerts: not found")
	// ErrTooManyWebhooks is returned when a developer already has
	// MaxWebhooks webhooks.
	ErrTooManyWebhooks = errors.New("alerts: too many webhooks")
)

// FieldError is bad input in one form field.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// DefaultThresholds are the percents a new rule warns at.
var DefaultThresholds = []int{80, 100}

// MaxWebhooks bounds one developer's webhooks.
const MaxWebhooks = 10

// Event types, the Sluice-Event header and the payload's "type".
const (
	EventThreshold = "threshold.crossed"
	EventPace      = "quota.pace"
	EventTest      = "test"
)

// Rule is what one developer wants to hear about, for their whole account
// (KeyID nil) or for one key (replacing the account's rule for that key).
type Rule struct {
	ID     int64  `db:"id"`
	UserID int64  `db:"user_id"`
	KeyID  *int64 `db:"key_id"`
	// Thresholds are percents of a limit, ascending, each 1 to 100.
	Thresholds []int32 `db:"thresholds"`
	// Pace warns when, at the pace so far, a quota runs out before it
	// renews.
	Pace bool `db:"pace"`
	// Email also sends each alert to the account's address (when the
	// portal has SMTP).
	Email     bool      `db:"email"`
	UpdatedAt time.Time `db:"updated_at"`
}

// ParseThresholds reads "80, 100" into ascending unique percents; the field
// is named "thresholds" in the error.
func ParseThresholds(s string) ([]int32, error) {
	var out []int32
	for part := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' || r == '%' }) {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 100 {
			return nil, &FieldError{"thresholds", fmt.Sprintf("%q is not a percent from 1 to 100", part)}
		}
		if !slices.Contains(out, int32(n)) {
			out = append(out, int32(n))
		}
	}
	if len(out) > 10 {
		return nil, &FieldError{"thresholds", "at most 10 thresholds"}
	}
	slices.Sort(out)
	return out, nil
}

// FormatThresholds writes percents the way ParseThresholds reads them.
func FormatThresholds(t []int32) string {
	parts := make([]string, len(t))
	for i, n := range t {
		parts[i] = strconv.Itoa(int(n))
	}
	return strings.Join(parts, ", ")
}

// Webhook is a developer's endpoint. The secret itself is never in this
// struct: it is shown once when created and kept sealed.
type Webhook struct {
	ID           int64     `db:"id"`
	UserID       int64     `db:"user_id"`
	URL          string    `db:"url"`
	SecretPrefix string    `db:"secret_prefix"`
	CreatedAt    time.Time `db:"created_at"`
}

// CheckURL accepts an absolute http or https URL with a host, and no user
// name or password (they would travel and be shown in the clear), whose
// host outbound reaches as written (egress.Rules.CheckHost: no loopback,
// private, link-local or reserved address, no localhost, no odd spelling of
// an address, unless the operator allows it); the field is named "url" in
// the error. A name is only checked when a delivery dials it, after
// resolution: this check gives a clear answer when the URL is saved and is
// never the guard.
func CheckURL(raw string, outbound egress.Rules) (string, error) {
	raw = strings.TrimSpace(raw)
	bad := func(msg string) (string, error) { return "", &FieldError{"url", msg} }
	if raw == "" {
		return bad("is required")
	}
	if len(raw) > 2000 {
		return bad("must be at most 2000 characters")
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return bad("must not contain spaces")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("must start with https:// or http://")
	}
	if u.User != nil {
		return bad("must not contain a user name or password; authenticate by checking the signature")
	}
	host := u.Hostname()
	if host == "" {
		return bad("must name a host, e.g. https://example.com/hooks/sluice")
	}
	if u.Fragment != "" {
		return bad("must not have a #fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("has a bad port")
		}
	}
	if err := outbound.CheckHost(host); err != nil {
		var re *egress.RefusedError
		if errors.As(err, &re) && re.Reason == "not a host name" {
			return bad("has a bad host name")
		}
		return bad("must be a public address: webhooks cannot reach loopback, private, link-local or reserved addresses, " +
			"localhost, or addresses written in odd forms (the operator can allow a private receiver)")
	}
	return u.String(), nil
}

// Delivery is one event queued for one destination, with its last outcome.
type Delivery struct {
	ID        int64   `db:"id"`
	UserID    int64   `db:"user_id"`
	WebhookID *int64  `db:"webhook_id"`
	EmailTo   *string `db:"email_to"`
	// Destination is the webhook URL or the email address.
	Destination string `db:"destination"`
	EventType   string `db:"event_type"`
	// State is pending, delivered or failed.
	State         string    `db:"state"`
	Attempts      int       `db:"attempts"`
	NextAttemptAt time.Time `db:"next_attempt_at"`
	// LastStatus is the receiver's HTTP status (250 for a mail accepted
	// by the SMTP server); nil before any answer.
	LastStatus  *int       `db:"last_status"`
	LastError   string     `db:"last_error"`
	CreatedAt   time.Time  `db:"created_at"`
	DeliveredAt *time.Time `db:"delivered_at"`
}

// Event is the JSON body of every alert.
type Event struct {
	// ID is unique per event ("evt_" and random hex); a receiver that
	// stores it can drop a retried duplicate.
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	// DeveloperID is the account the alert is about; KeyID is set for a
	// limit counted per key.
	DeveloperID int64  `json:"developer_id"`
	KeyID       *int64 `json:"key_id,omitempty"`
	// Limit is the limit or quota crossed; nil for a test event.
	Limit *EventLimit `json:"limit,omitempty"`
	// ThresholdPercent is the threshold crossed (threshold.crossed).
	ThresholdPercent int `json:"threshold_percent,omitempty"`
	// Used and Capacity are in units of cost; UsedPercent is Used of
	// Capacity, rounded down.
	Used        int64 `json:"used"`
	Capacity    int64 `json:"capacity"`
	UsedPercent int64 `json:"used_percent"`
	// PeriodStart is the window or quota period the crossing belongs to;
	// ResetsAt when it is fully available again (a quota's renewal).
	PeriodStart time.Time `json:"period_start"`
	ResetsAt    time.Time `json:"resets_at"`
	// ProjectedUse is, for quota.pace, what the period would use at the
	// pace so far.
	ProjectedUse int64 `json:"projected_use,omitempty"`
	// Message is one human sentence about the event.
	Message string `json:"message"`
}

// EventLimit names the limit an event is about.
type EventLimit struct {
	Policy        string `json:"policy"`
	Route         string `json:"route"`
	Algorithm     string `json:"algorithm"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Period        string `json:"period,omitempty"`
}
