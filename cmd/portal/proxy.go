package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
)

// checkProxyURL accepts an absolute http or https URL with no path, query
// or credentials: the base the reverse proxy's listener is reached at.
func checkProxyURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an absolute http or https URL")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("must be scheme and host only")
	}
	return nil
}

// checkProxyAddr keeps the reverse proxy off the console's listener: it
// must have an address of its own, and PORTAL_PROXY_URL means nothing
// without it.
func checkProxyAddr(c Config) error {
	if c.ProxyAddr == "" {
		if c.ProxyURL != "" {
			return errors.New("invalid PORTAL_PROXY_URL (-proxy-url): needs PORTAL_PROXY_ADDR, the listener it names")
		}
		return nil
	}
	if _, p, _ := net.SplitHostPort(c.ProxyAddr); p != "0" &&
		(c.ProxyAddr == c.Addr || c.ProxyAddr == c.MetricsAddr || c.ProxyAddr == c.DebugAddr || c.ProxyAddr == c.GRPCAddr) {
		return fmt.Errorf("invalid PORTAL_PROXY_ADDR (-proxy-addr) %q: the same as another listener's; the reverse proxy needs an origin of its own, apart from the console's", c.ProxyAddr)
	}
	return nil
}
