package alerts_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
)

// A receiver checks the Sluice-Signature header over the raw body with the
// webhook's secret before trusting the event.
func ExampleVerify() {
	secret := []byte("whsec_example")
	body := []byte(`{"id":"evt_1","type":"test"}`)
	sent := time.Unix(1_800_000_000, 0)
	header := alerts.Sign(secret, sent, body) // what Sluice sends
	fmt.Println(header)
	fmt.Println(alerts.Verify(secret, header, body, sent.Add(time.Second), 0))
	fmt.Println(alerts.Verify(secret, header, []byte(`{"id":"evt_1","type":"tampered"}`), sent, 0))
	fmt.Println(alerts.Verify(secret, header, body, sent.Add(time.Hour), 0))
	// Output:
	// t=1800000000,v1=78e708e45f27013ddf44736bed9182e29077cebf0492589574e712e99cc6d458
	// <nil>
	// alerts: signature does not match
	// alerts: signature timestamp outside tolerance
}
