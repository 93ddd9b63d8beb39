package main

import (
	"errors"
	"strings"
)

// tracingConfig is the OpenTelemetry traces of the decisions (issue 35).
type tracingConfig struct {
	// OTLP turns the traces on, exported over OTLP/HTTP to the endpoint
	// the standard OTEL_EXPORTER_OTLP_* variables name (PORTAL_TRACES).
	OTLP bool
}

// tracingSettings are the settings of tracingConfig. PORTAL_TRACES
// follows the standard OTEL_TRACES_EXPORTER when unset: "otlp" there turns
// the traces on, anything else (or nothing) leaves them off, so a portal
// never exports unless told to; OTEL_SDK_DISABLED=true turns them off
// whatever the rest says.
func tracingSettings(getenv func(string) string) []setting {
	def := "off"
	if strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) == "otlp" {
		def = "otlp"
	}
	disabled := strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
	return []setting{
		{env: "PORTAL_TRACES", flag: "traces", def: def,
			accepts: "otlp (export a span per rate-limit decision over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT) or off",
			set: func(c *Config, v string) error {
				switch v {
				case "off":
					c.Tracing.OTLP = false
				case "otlp":
					c.Tracing.OTLP = !disabled
				default:
					return errors.New("not otlp or off")
				}
				return nil
			}},
	}
}
