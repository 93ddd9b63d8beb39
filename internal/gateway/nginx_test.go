package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestNginxAuthRequest runs docs/gateways/nginx.conf in Debian's nginx in
// front of a small upstream, asking a real /v1/check.
func TestNginxAuthRequest(t *testing.T) {
	nginx := binary(t, "nginx")
	f := newFixture(t, nil)
	check := f.checkServer(t)
	api := newUpstream(t)
	port := itoa(freePort(t))

	dir := t.TempDir()
	site := docConfig(t, "nginx.conf", map[string]string{
		"127.0.0.1:8080": hostPort(check.URL),
		"127.0.0.1:3000": hostPort(api.URL),
		"127.0.0.1:8000": "127.0.0.1:" + port,
	})
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
	start(t, exec.Command(nginx, "-p", dir, "-c", conf, "-e", "stderr"), "127.0.0.1:"+port)

	throughGateway(t, f, api, "http://127.0.0.1:"+port)
}
