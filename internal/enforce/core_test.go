package enforce

import (
	"net/netip"
	"testing"
	"time"
)

func TestPeriodBounds(t *testing.T) {
	cases := []struct {
		name        string
		period      string
		anchor, now time.Time
		start, end  time.Time
	}{
		{"DayFromTheAnchorsTimeOfDay", CodeQuotaDay, utcAt(2026, 3, 5, 14), utcAt(2026, 11, 30, 9), utcAt(2026, 11, 29, 14), utcAt(2026, 11, 30, 14)},
		{"DayAtTheRenewalInstant", CodeQuotaDay, utcAt(2026, 3, 5, 14), utcAt(2026, 11, 30, 14), utcAt(2026, 11, 30, 14), utcAt(2026, 12, 1, 14)},
		{"MonthOnThe31stRenewsOnTheLastDayOfFebruary", CodeQuotaMonth, utcAt(2026, 1, 31, 10), utcAt(2026, 2, 28, 11), utcAt(2026, 2, 28, 10), utcAt(2026, 3, 31, 10)},
		{"MonthOnThe31stBeforeFebruarysRenewal", CodeQuotaMonth, utcAt(2026, 1, 31, 10), utcAt(2026, 2, 28, 9), utcAt(2026, 1, 31, 10), utcAt(2026, 2, 28, 10)},
		{"MonthOnThe31stInALeapFebruary", CodeQuotaMonth, utcAt(2027, 8, 31, 0), utcAt(2028, 3, 1, 0), utcAt(2028, 2, 29, 0), utcAt(2028, 3, 31, 0)},
		{"MonthOnThe30thInApril", CodeQuotaMonth, utcAt(2026, 1, 30, 0), utcAt(2026, 4, 30, 1), utcAt(2026, 4, 30, 0), utcAt(2026, 5, 30, 0)},
		{"MonthAcrossTheYearsEnd", CodeQuotaMonth, utcAt(2025, 6, 15, 0), utcAt(2027, 1, 3, 0), utcAt(2026, 12, 15, 0), utcAt(2027, 1, 15, 0)},
		{"YearOn29FebruaryInAnOrdinaryYear", CodeQuotaYear, utcAt(2028, 2, 29, 12), utcAt(2029, 3, 1, 0), utcAt(2029, 2, 28, 12), utcAt(2030, 2, 28, 12)},
		{"YearOn29FebruaryBackInALeapYear", CodeQuotaYear, utcAt(2028, 2, 29, 12), utcAt(2032, 2, 29, 13), utcAt(2032, 2, 29, 12), utcAt(2033, 2, 28, 12)},
		{"YearBeforeTheAnniversary", CodeQuotaYear, utcAt(2026, 7, 1, 0), utcAt(2027, 6, 30, 23), utcAt(2026, 7, 1, 0), utcAt(2027, 7, 1, 0)},
		{"EpochAnchorIsTheFirstAtMidnight", CodeQuotaMonth, time.Unix(0, 0), utcAt(2026, 5, 17, 8), utcAt(2026, 5, 1, 0), utcAt(2026, 6, 1, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, e := PeriodBounds(tc.period, tc.now.UnixMicro(), tc.anchor.UnixMicro())
			if s != tc.start.UnixMicro() || e != tc.end.UnixMicro() {
				t.Errorf("period = [%s, %s), want [%s, %s)", time.UnixMicro(s).UTC(), time.UnixMicro(e).UTC(), tc.start, tc.end)
			}
		})
	}
}

func utcAt(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

func TestAddressPrefixes(t *testing.T) {
	tests := []struct {
		name     string
		prefixes AddressPrefixes
		addr     string
		want     string
	}{
		{"IPv4Whole", AddressPrefixes{}, "192.0.2.7", "ip:192.0.2.7"},
		{"IPv4MappedIsIPv4", AddressPrefixes{}, "::ffff:192.0.2.7", "ip:192.0.2.7"},
		{"IPv6Default64", AddressPrefixes{}, "2001:db8:1:2:aaaa::1", "ip:2001:db8:1:2::/64"},
		{"IPv6SameBlock", AddressPrefixes{}, "2001:db8:1:2:ffff:ffff:ffff:ffff", "ip:2001:db8:1:2::/64"},
		{"IPv6Zone", AddressPrefixes{}, "fe80::1%eth0", "ip:fe80::/64"},
		{"IPv4Block24", AddressPrefixes{IPv4: 24}, "192.0.2.7", "ip:192.0.2.0/24"},
		{"IPv6Block48", AddressPrefixes{IPv6: 48}, "2001:db8:1:2::1", "ip:2001:db8:1::/48"},
		{"IPv6Whole", AddressPrefixes{IPv6: 128}, "2001:db8::1", "ip:2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.prefixes.Subject(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("Subject(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	t.Run("InvalidAddress", func(t *testing.T) {
		if got := (AddressPrefixes{}).Subject(netip.Addr{}); got != "ip:unknown" {
			t.Fatalf("Subject(invalid) = %q", got)
		}
	})
	t.Run("Validate", func(t *testing.T) {
		for _, p := range []AddressPrefixes{{IPv4: 33}, {IPv4: -1}, {IPv6: 129}} {
			if err := p.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", p)
			}
		}
		if err := (AddressPrefixes{IPv4: 24, IPv6: 56}).Validate(); err != nil {
			t.Errorf("Validate(24, 56) = %v", err)
		}
	})
}

func TestWindowText(t *testing.T) {
	cases := []struct {
		w    time.Duration
		want string
	}{
		{time.Second, "second"}, {time.Minute, "minute"}, {time.Hour, "hour"}, {24 * time.Hour, "day"},
		{48 * time.Hour, "2 days"}, {5 * time.Hour, "5 hours"}, {90 * time.Minute, "90 minutes"},
		{1500 * time.Millisecond, "2 seconds"}, {45 * time.Second, "45 seconds"},
	}
	for _, tc := range cases {
		if got := WindowText(tc.w); got != tc.want {
			t.Errorf("WindowText(%s) = %q, want %q", tc.w, got, tc.want)
		}
	}
}
