package services

import "testing"

// TestValidateUpstreamAddress: an upstream may be an internal service
// (loopback, private, a name), never the machine's metadata, link-local,
// unspecified or reserved addresses, nor an odd spelling of an address.
func TestValidateUpstreamAddress(t *testing.T) {
	for _, tc := range []struct {
		upstream string
		ok       bool
	}{
		{"http://10.0.0.5:8080", true},
		{"http://127.0.0.1:9000", true},
		{"http://[::1]:9000", true},
		{"http://localhost:8080", true},
		{"https://api.internal", true},
		{"http://192.168.1.20", true},
		{"http://169.254.169.254/", false},
		{"http://169.254.169.254/latest/meta-data", false},
		{"http://[::ffff:169.254.169.254]/", false},
		{"http://[fe80::1]:8080", false},
		{"http://[fd00:ec2::254]/", false},
		{"http://100.100.100.200/", false},
		{"http://metadata.google.internal/", false},
		{"http://0.0.0.0:8080", false},
		{"http://0:8080", false},
		{"http://0177.0.0.1:8080", false},
		{"http://0xa9fea9fe/", false},
		{"http://224.0.0.1/", false},
	} {
		err := Validate(Input{Slug: "svc", Name: "Svc", Upstream: tc.upstream})
		ve, isVE := err.(interface{ Has(string) bool })
		if tc.ok && err != nil {
			t.Errorf("upstream %q refused: %v", tc.upstream, err)
		}
		if !tc.ok && (!isVE || !ve.Has("upstream_url")) {
			t.Errorf("upstream %q: %v, want an error on upstream_url", tc.upstream, err)
		}
	}
}
