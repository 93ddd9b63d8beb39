package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestLoadConfigGatewaySlotLease(t *testing.T) {
	cfg, _, err := LoadConfig(nil, envOf(nil), io.Discard)
	if err != nil || cfg.Gateway.SlotLease != DefaultGatewaySlotLease {
		t.Fatalf("default: %v %v, want %v", cfg.Gateway.SlotLease, err, DefaultGatewaySlotLease)
	}
	cfg, _, err = LoadConfig(nil, envOf(map[string]string{"PORTAL_GATEWAY_SLOT_LEASE": "90s"}), io.Discard)
	if err != nil || cfg.Gateway.SlotLease != 90*time.Second {
		t.Fatalf("90s: %v %v", cfg.Gateway.SlotLease, err)
	}
	for _, bad := range []string{"0s", "2h", "soon"} {
		_, _, err := LoadConfig(nil, envOf(map[string]string{"PORTAL_GATEWAY_SLOT_LEASE": bad}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "PORTAL_GATEWAY_SLOT_LEASE") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}
