package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// Resolver looks up the addresses of a host name; *net.Resolver is one, and
// tests give a Dialer their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configures NewDialer. The zero value is a Public dialer with no
// exceptions.
type Options struct {
	Rules
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Timeout bounds one connection attempt; 0 means 5 seconds.
	Timeout time.Duration
	// KeepAlive is the TCP keep-alive period; 0 means 30 seconds.
	KeepAlive time.Duration
}

// maxAddrs is how many of a name's addresses one dial tries.
const maxAddrs = 4

// Dialer connects only where its Rules allow. It is safe for concurrent
// use.
type Dialer struct {
	rules              Rules
	resolver           Resolver
	timeout, keepAlive time.Duration
}

// NewDialer returns a Dialer following o.
func NewDialer(o Options) *Dialer {
	d := &Dialer{rules: o.Rules, resolver: o.Resolver, timeout: o.Timeout, keepAlive: o.KeepAlive}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	if d.timeout <= 0 {
		d.timeout = 5 * time.Second
	}
	if d.keepAlive <= 0 {
		d.keepAlive = 30 * time.Second
	}
	return d
}

// Rules is what the Dialer reaches, for checking a URL when it is saved.
func (d *Dialer) Rules() Rules { return d.rules }

// DialContext connects to address ("host:port") over TCP, as
// net.Dialer.DialContext does, when the Rules allow: the host as written
// (CheckHost), each address it resolves to (CheckAddr), and again the
// address the socket is about to connect to, in the net.Dialer's Control
// hook. Refusals are *RefusedError (errors.Is ErrRefused).
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ipNetwork := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	if ipNetwork == "" {
		return nil, &RefusedError{Host: address, Reason: "network " + network + " is not TCP"}
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, &RefusedError{Host: host, Reason: "port " + portText + " is not a number from 1 to 65535"}
	}
	if err := d.rules.CheckHost(host); err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = d.resolver.LookupNetIP(ctx, ipNetwork, host); err != nil {
		return nil, fmt.Errorf("egress: resolve %s: %w", host, err)
	}
	var refused, failed error
	tried := 0
	for _, ip := range ips {
		ip = ip.WithZone("").Unmap()
		if (network == "tcp4" && !ip.Is4()) || (network == "tcp6" && !ip.Is6()) {
			continue
		}
		if err := d.rules.CheckAddr(host, ip); err != nil {
			refused = firstOf(refused, err)
			continue
		}
		if tried++; tried > maxAddrs {
			break
		}
		nd := net.Dialer{Timeout: d.timeout, KeepAlive: d.keepAlive, Control: d.control(host)}
		conn, err := nd.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		failed = err
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case failed != nil:
		return nil, failed
	case refused != nil:
		return nil, refused
	}
	return nil, fmt.Errorf("egress: %s has no %s address", host, ipNetwork)
}

func firstOf(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// control checks the address the socket connects to: the guard that holds
// whatever resolved the name.
func (d *Dialer) control(host string) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &RefusedError{Host: host, Reason: "unreadable address " + address}
		}
		return d.rules.CheckAddr(host, ap.Addr())
	}
}

// ClientOptions shapes Client.
type ClientOptions struct {
	// Timeout bounds a whole exchange, redirects and body included; 0
	// means 10 seconds.
	Timeout time.Duration
	// MaxResponseBytes bounds a response body: reading past it fails with
	// ErrResponseTooLarge; 0 means 1 MiB.
	MaxResponseBytes int64
	// MaxRedirects is how many redirects are followed (each hop dialed
	// through the Dialer, so checked like the first); 0 follows none and
	// returns the 3xx.
	MaxRedirects int
}

// ErrResponseTooLarge is returned when reading a body past
// ClientOptions.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("egress: response body too large")

// Client returns an HTTP client that dials through d, takes no proxy from
// the environment (a proxy would make the connection for it, unchecked),
// and bounds time, redirects and response size.
func (d *Dialer) Client(o ClientOptions) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 1 << 20
	}
	maxRedirects := o.MaxRedirects
	return &http.Client{
		Timeout:   o.Timeout,
		Transport: boundedTransport{next: d.Transport(), max: o.MaxResponseBytes},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return http.ErrUseLastResponse
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("egress: redirect to a %s URL", req.URL.Scheme)
			}
			return nil
		},
	}
}

// Transport returns an http.Transport that dials through d, with no proxy
// and bounded handshakes and headers.
func (d *Dialer) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           100,
		IdleConnTimeout:        90 * time.Second,
	}
}

// boundedTransport cuts response bodies at max bytes.
type boundedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		_ = resp.Body.Close()
		return nil, ErrResponseTooLarge
	}
	resp.Body = &boundedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), 0
		return n, ErrResponseTooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
