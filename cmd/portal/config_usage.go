package main

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/keyverify"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// usageConfig is the settings of the request log, analytics, metering and
// the key verification API (issue 36).
type usageConfig struct {
	// RequestLog turns the request log on (PORTAL_REQUEST_LOG).
	RequestLog bool
	// AdmitSample and RejectSample keep one decision in n in the log
	// (PORTAL_REQUEST_LOG_ADMIT_SAMPLE, PORTAL_REQUEST_LOG_REJECT_SAMPLE);
	// 0 keeps none.
	AdmitSample, RejectSample int
	// Retention, MaxRows and MaxMB bound the log (PORTAL_REQUEST_LOG_RETENTION,
	// PORTAL_REQUEST_LOG_MAX_ROWS, PORTAL_REQUEST_LOG_MAX_MB).
	Retention time.Duration
	MaxRows   int
	MaxMB     int
	// Buffer is how many entries wait for the writer at most
	// (PORTAL_REQUEST_LOG_BUFFER).
	Buffer int
	// MeterPeriod is the period of a usage record (PORTAL_METER_PERIOD).
	MeterPeriod time.Duration
	// MeterURL and MeterSecret, when set, push usage records to a webhook
	// signed with the secret (PORTAL_METER_WEBHOOK_URL,
	// PORTAL_METER_WEBHOOK_SECRET); MeterEventName is their event_name
	// (PORTAL_METER_EVENT_NAME).
	MeterURL, MeterSecret, MeterEventName string
	// VerifyPerService and VerifyPerAddress are the key verification API's
	// own limits, requests a minute (PORTAL_VERIFY_SERVICE_RATE,
	// PORTAL_VERIFY_ADDRESS_RATE).
	VerifyPerService, VerifyPerAddress int
}

// check says which setting to fix when the metering webhook's settings
// disagree.
func (c usageConfig) check() error {
	switch {
	case c.MeterURL != "" && c.MeterSecret == "":
		return errors.New("invalid PORTAL_METER_WEBHOOK_SECRET (-meter-webhook-secret): PORTAL_METER_WEBHOOK_URL is set, so the deliveries need a secret to be signed with")
	case c.MeterURL == "" && c.MeterSecret != "":
		return errors.New("invalid PORTAL_METER_WEBHOOK_URL (-meter-webhook-url): PORTAL_METER_WEBHOOK_SECRET is set but no URL to deliver to")
	}
	return nil
}

var eventName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,100}$`)

// requestLogOptions are the writer's options from c.
func (c usageConfig) requestLogOptions() requestlog.Options {
	sample := func(n int) int {
		if n == 0 {
			return -1 // none
		}
		return n
	}
	return requestlog.Options{
		BufferSize: c.Buffer, AdmitSample: sample(c.AdmitSample), RejectSample: sample(c.RejectSample),
		Retention: c.Retention, MaxRows: int64(c.MaxRows), MaxBytes: int64(c.MaxMB) << 20,
	}
}

// usageSettings are the settings of usageConfig.
func usageSettings() []setting {
	return []setting{
		{env: "PORTAL_REQUEST_LOG", flag: "request-log", def: "true", accepts: "true or false", boolFlag: true,
			set: func(c *Config, v string) error {
				var err error
				c.Usage.RequestLog, err = strconv.ParseBool(v)
				return err
			}},
		{env: "PORTAL_REQUEST_LOG_ADMIT_SAMPLE", flag: "request-log-admit-sample", def: strconv.Itoa(requestlog.DefaultAdmitSample),
			accepts: "a whole number from 0 to 1000000: one admitted request in n is logged (1 logs all, 0 none)",
			set:     intSetting(0, 1_000_000, func(c *Config) *int { return &c.Usage.AdmitSample })},
		{env: "PORTAL_REQUEST_LOG_REJECT_SAMPLE", flag: "request-log-reject-sample", def: strconv.Itoa(requestlog.DefaultRejectSample),
			accepts: "a whole number from 0 to 1000000: one rejected (or degraded, unauthorized, unavailable) request in n is logged (1 logs all, 0 none)",
			set:     intSetting(0, 1_000_000, func(c *Config) *int { return &c.Usage.RejectSample })},
		{env: "PORTAL_REQUEST_LOG_RETENTION", flag: "request-log-retention", def: "168h", accepts: "a duration from 24h to 8760h, rounded up to whole days, e.g. 168h",
			set: func(c *Config, v string) error {
				return setDuration(&c.Usage.Retention, v, 24*time.Hour, 8760*time.Hour)
			}},
		{env: "PORTAL_REQUEST_LOG_MAX_ROWS", flag: "request-log-max-rows", def: strconv.Itoa(requestlog.DefaultMaxRows),
			accepts: "a whole number from 1000 to 2000000000: past it the oldest days of the log are dropped",
			set:     intSetting(1000, 2_000_000_000, func(c *Config) *int { return &c.Usage.MaxRows })},
		{env: "PORTAL_REQUEST_LOG_MAX_MB", flag: "request-log-max-mb", def: strconv.Itoa(requestlog.DefaultMaxBytes >> 20),
			accepts: "a whole number of megabytes from 10 to 10000000: past it (with indexes) the oldest days of the log are dropped",
			set:     intSetting(10, 10_000_000, func(c *Config) *int { return &c.Usage.MaxMB })},
		{env: "PORTAL_REQUEST_LOG_BUFFER", flag: "request-log-buffer", def: strconv.Itoa(requestlog.DefaultBufferSize),
			accepts: "a whole number from 1000 to 10000000: entries waiting for the writer at most; past it they are dropped and counted",
			set:     intSetting(1000, 10_000_000, func(c *Config) *int { return &c.Usage.Buffer })},
		{env: "PORTAL_METER_PERIOD", flag: "meter-period", def: "day", accepts: "hour or day: the period of a usage record",
			set: func(c *Config, v string) error {
				var err error
				c.Usage.MeterPeriod, err = metering.ParsePeriod(v)
				return err
			}},
		{env: "PORTAL_METER_WEBHOOK_URL", flag: "meter-webhook-url", secret: true,
			accepts: "an http or https URL that receives the usage records as signed meter events, or empty for none",
			set: func(c *Config, v string) error {
				c.Usage.MeterURL = v
				if v == "" {
					return nil
				}
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
					return errors.New("not an http or https URL")
				}
				return nil
			}},
		{env: "PORTAL_METER_WEBHOOK_SECRET", flag: "meter-webhook-secret", secret: true,
			accepts: "at least 16 characters: the key of the deliveries' Sluice-Signature (set with PORTAL_METER_WEBHOOK_URL)",
			set: func(c *Config, v string) error {
				c.Usage.MeterSecret = v
				if v != "" && len(v) < 16 {
					return errors.New("too short")
				}
				return nil
			}},
		{env: "PORTAL_VERIFY_SERVICE_RATE", flag: "verify-service-rate", def: strconv.Itoa(keyverify.DefaultPerService),
			accepts: "a whole number from 6 to 10000000: key verifications a minute per service token (a sixth of it at once)",
			set:     intSetting(6, 10_000_000, func(c *Config) *int { return &c.Usage.VerifyPerService })},
		{env: "PORTAL_VERIFY_ADDRESS_RATE", flag: "verify-address-rate", def: strconv.Itoa(keyverify.DefaultPerAddress),
			accepts: "a whole number from 6 to 10000000: requests to the key verification API a minute per client address, token or not",
			set:     intSetting(6, 10_000_000, func(c *Config) *int { return &c.Usage.VerifyPerAddress })},
		{env: "PORTAL_METER_EVENT_NAME", flag: "meter-event-name", def: metering.DefaultEventName,
			accepts: "1 to 100 letters, digits, '_', '.' or '-': the event_name of every meter event",
			set: func(c *Config, v string) error {
				if !eventName.MatchString(v) {
					return errors.New("not an event name")
				}
				c.Usage.MeterEventName = v
				return nil
			}},
	}
}
