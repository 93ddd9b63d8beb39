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
