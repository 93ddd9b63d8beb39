package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nginxCheckTimeout is proxy_read_timeout in docs/gateways/nginx.conf.
const nginxCheckTimeout = 2 * time.Second

// TestNginxAuthRequest runs docs/gateways/nginx.conf in Debian's nginx in
// front of a small upstream, asking a real /v1/check.
func TestNginxAuthRequest(t *testing.T) {
	nginx := binary(t, "nginx")
	f := newFixture(t, nil)
	check := f.checkServer(t)
	api := newUpstream(t)
	base, logs := startNginx(t, nginx, nginxConfig(t, hostPort(check.URL), hostPort(api.URL)))

	throughGateway(t, f, api, base)
	// A refusal is the client's answer, not nginx's error: no line per
	// 429, 401 or 503 in the error log.
	if s := logs.String(); s != "" {
		t.Errorf("nginx logged:\n%s", s)
	}
}

// TestNginxPortalStopped stops the portal process with SIGSTOP and measures
// nginx's answer with the shipped configuration (fail closed) and its
// fail-open variant.
func TestNginxPortalStopped(t *testing.T) {
	nginx := binary(t, "nginx")
	p := startPortalProcess(t)
	api := newUpstream(t)
	conf := nginxConfig(t, p.Addr, hostPort(api.URL))
	closed, _ := startNginx(t, nginx, conf)
	open, _ := startNginx(t, nginx, failOpen(t, conf))
	portalStopped(t, p, api, closed, open, nginxCheckTimeout)
}

// nginxConfig is docs/gateways/nginx.conf asking the check at sluice and
// proxying to api; startNginx gives it a port.
func nginxConfig(t *testing.T, sluice, api string) string {
	t.Helper()
	conf := docConfig(t, "nginx.conf", map[string]string{
		"127.0.0.1:8080": sluice,
		"127.0.0.1:3000": api,
	})
	if !containsLine(conf, "proxy_read_timeout "+itoa(int(nginxCheckTimeout/time.Second))+"s;") {
		t.Fatalf("nginx.conf's proxy_read_timeout is not %v", nginxCheckTimeout)
	}
	return conf
}

// startNginx runs site (the server configuration) in nginx, on a free port
// in place of the documented 127.0.0.1:8000, until the test ends and returns
// its base URL and its error log.
func startNginx(t *testing.T, nginx, site string) (string, *logBuffer) {
	t.Helper()
	addr := "127.0.0.1:" + itoa(freePort(t))
	site = onPort(t, site, addr)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sluice.conf"), []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	// The main context a distribution's nginx.conf provides, with every
	// path inside the test's directory.
	main := `
daemon off;
master_process off;
worker_processes 1;
error_log stderr warn;
pid ` + dir + `/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path ` + dir + `/body;
    proxy_temp_path ` + dir + `/proxy;
    fastcgi_temp_path ` + dir + `/fastcgi;
    uwsgi_temp_path ` + dir + `/uwsgi;
    scgi_temp_path ` + dir + `/scgi;
    include ` + dir + `/sluice.conf;
}
`
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := start(t, exec.Command(nginx, "-p", dir, "-c", conf, "-e", "stderr"), addr)
	return "http://" + addr, logs
}

// TestNginxReleasesConcurrencySlots: through the shipped nginx.conf a
// request holds its slot while the API works on it, and nginx gives the
// slot back once the response is done (post_action), long before the
// lease would run out: a developer's finished requests hold nothing.
func TestNginxReleasesConcurrencySlots(t *testing.T) {
	nginx := binary(t, "nginx")
	f := newFixture(t, nil)
	withOrdersInFlight(t, f)
	check := f.checkServer(t)
	arrived, finish := make(chan struct{}, 8), make(chan struct{}, 8)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-finish
		_, _ = io.WriteString(w, "ordered")
	}))
	t.Cleanup(api.Close)
	base, logs := startNginx(t, nginx, nginxConfig(t, hostPort(check.URL), hostPort(api.URL)))
	client := &http.Client{Timeout: 10 * time.Second}
	order := func() (int, error) {
		req, _ := http.NewRequest("POST", base+"/orders", strings.NewReader("{}"))
		req.Host = "shop.example.com"
		req.Header.Set("X-API-Key", f.secret)
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, nil
	}
	for round := range 3 {
		done := make(chan int, 1)
		go func() { code, _ := order(); done <- code }()
		<-arrived
		if code, err := order(); err != nil || code != http.StatusTooManyRequests {
			t.Fatalf("round %d: a second order while the first is at the API: %d %v, want 429", round, code, err)
		}
		finish <- struct{}{}
		if code := <-done; code != http.StatusOK {
			t.Fatalf("round %d: the first order: %d", round, code)
		}
		// Released after the response, not a lease (a minute) later.
		deadline := time.Now().Add(5 * time.Second)
		for {
			go func() { finish <- struct{}{} }()
			code, err := order()
			if err != nil {
				t.Fatal(err)
			}
			if code == http.StatusOK {
				<-arrived
				break
			}
			<-finish // nobody took it
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the slot was not given back within 5 s of the response (%d)", round, code)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if s := logs.String(); s != "" {
		t.Errorf("nginx logged:\n%s", s)
	}
}
