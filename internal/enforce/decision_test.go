package enforce

import (
	"testing"
	"time"
)

func TestDecisionBinding(t *testing.T) {
	global := Limit{Name: "global", Limit: 1000}
	search := Limit{Name: "search", Limit: 10}
	ip := Limit{Name: "ip", Limit: 100}
	cases := []struct {
		name     string
		decision Decision
		want     LayerResult
	}{
		{
			name:     "NoLayersGivesZero",
			decision: Decision{Allowed: true},
			want:     LayerResult{},
		},
		{
			name: "AdmittedPicksLeastRemainingRelativeToLimit",
			decision: Decision{Allowed: true, Layers: []LayerResult{
				{Limit: global, Allowed: true, Remaining: 50}, // 5 %
				{Limit: search, Allowed: true, Remaining: 1},  // 10 %
				{Limit: ip, Allowed: true, Remaining: 4},      // 4 %
			}},
			want: LayerResult{Limit: ip, Allowed: true, Remaining: 4},
		},
		{
			name: "AdmittedTieGoesToEarlierLayer",
			decision: Decision{Allowed: true, Layers: []LayerResult{
				{Limit: search, Allowed: true, Remaining: 5},
				{Limit: global, Allowed: true, Remaining: 500},
			}},
			want: LayerResult{Limit: search, Allowed: true, Remaining: 5},
		},
		{
			name: "RejectedPicksRejectingLayerOverFullerAdmittingOne",
			decision: Decision{Allowed: false, Layers: []LayerResult{
				{Limit: search, Allowed: true, Remaining: 0},
				{Limit: global, Allowed: false, Remaining: 0, RetryAfter: time.Second},
			}},
			want: LayerResult{Limit: global, Allowed: false, Remaining: 0, RetryAfter: time.Second},
		},
		{
			name: "RejectedPicksLongestRetryAfter",
			decision: Decision{Allowed: false, Layers: []LayerResult{
				{Limit: search, Allowed: false, RetryAfter: 2 * time.Second, ResetAfter: 3 * time.Second},
				{Limit: global, Allowed: false, RetryAfter: 40 * time.Second, ResetAfter: time.Minute},
				{Limit: ip, Allowed: false, RetryAfter: 5 * time.Second},
			}},
			want: LayerResult{Limit: global, Allowed: false, RetryAfter: 40 * time.Second, ResetAfter: time.Minute},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.decision.Binding()
			if got != tc.want {
				t.Errorf("Binding() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecisionDegradable(t *testing.T) {
	degrade := Limit{Name: "burst", Mode: ModeDegrade, Limit: 10}
	degrade2 := Limit{Name: "daily", Mode: ModeDegrade, Limit: 100}
	reject := Limit{Name: "global", Limit: 1000}
	shadow := Limit{Name: "trial", Mode: ModeShadow, Limit: 5}
	cases := []struct {
		name     string
		decision Decision
		tier     string
		ok       bool
	}{
		{"AdmittedIsNot", Decision{Allowed: true, Layers: []LayerResult{{Limit: degrade, Allowed: true}}}, "", false},
		{"NoLayersIsNot", Decision{}, "", false},
		{"DegradeRejectionIs", Decision{Layers: []LayerResult{{Limit: reject, Allowed: true}, {Limit: degrade}}}, "burst", true},
		{"FirstDegradeLayerNamesIt", Decision{Layers: []LayerResult{{Limit: degrade2}, {Limit: degrade}}}, "daily", true},
		{"OneRejectLayerRefuses", Decision{Layers: []LayerResult{{Limit: degrade}, {Limit: reject}}}, "", false},
		{"QueueLayerRefuses", Decision{Layers: []LayerResult{{Limit: degrade}, {Limit: Limit{Name: "q", Mode: ModeQueue}}}}, "", false},
		{"ShadowLayerIsIgnored", Decision{Layers: []LayerResult{{Limit: shadow}, {Limit: degrade}}}, "burst", true},
		{"ShadowAloneIsNot", Decision{Layers: []LayerResult{{Limit: shadow}}}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tier, ok := tc.decision.Degradable()
			if tier != tc.tier || ok != tc.ok {
				t.Fatalf("Degradable() = %q, %v; want %q, %v", tier, ok, tc.tier, tc.ok)
			}
		})
	}
}
