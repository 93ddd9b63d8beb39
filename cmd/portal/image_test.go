package main

import (
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// dockerStage is the final stage of the Dockerfile as the image runs it.
type dockerStage struct {
	from   string
	user   string
	env    map[string]string
	expose []string
	volume []string
	copies []string // COPY instructions, as written
	health string
}

// readDockerfile reads the instructions of the Dockerfile's last stage,
// continuation lines joined.
func readDockerfile(t *testing.T) dockerStage {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	cont := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		if line = cont + line; line != "" {
			lines = append(lines, line)
		}
		cont = ""
	}
	var st dockerStage
	for _, line := range lines {
		op, arg, _ := strings.Cut(line, " ")
		arg = strings.TrimSpace(arg)
		switch strings.ToUpper(op) {
		case "FROM":
			st = dockerStage{from: arg, env: map[string]string{}}
		case "USER":
			st.user = arg
		case "ENV":
			for _, kv := range strings.Fields(arg) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("ENV %q: write ENV NAME=value", arg)
				}
				st.env[k] = v
			}
		case "EXPOSE":
			st.expose = append(st.expose, strings.Fields(arg)...)
		case "VOLUME":
			st.volume = append(st.volume, strings.Fields(arg)...)
		case "COPY":
			st.copies = append(st.copies, arg)
		case "HEALTHCHECK":
			st.health = arg
		}
	}
	return st
}

// TestDockerfile checks the image as no docker engine runs here: it starts
// as a non-root user, owns the data directory that a fresh volume starts as
// a copy of, exposes exactly the ports its settings listen on, the same as
// the portal's defaults, and checks its own health.
func TestDockerfile(t *testing.T) {
	st := readDockerfile(t)
	uid, _, _ := strings.Cut(st.user, ":")
	if uid == "" || uid == "0" || uid == "root" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric non-root user (Kubernetes' runAsNonRoot can only check a number)", st.user)
	}

	cfg, _, err := LoadConfig(nil, func(k string) string { return st.env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the image's ENV is no valid configuration: %v", err)
	}
	defaults, _, err := LoadConfig(nil, envOf(map[string]string{"HOME": "/home/u"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != defaults.Addr {
		t.Errorf("the image's PORTAL_ADDR %q is not the portal's default %q", cfg.Addr, defaults.Addr)
	}
	if cfg.GRPCAddr == "" {
		t.Error("the image serves no gRPC (PORTAL_GRPC_ADDR): Envoy could not reach it")
	}
	var ports []string
	for _, addr := range []string{cfg.Addr, cfg.GRPCAddr, cfg.DebugAddr} {
		if addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, port)
	}
	slices.Sort(ports)
	expose := slices.Sorted(slices.Values(st.expose))
	if !slices.Equal(ports, expose) {
		t.Errorf("EXPOSE %v, but the image listens on %v", expose, ports)
	}

	dir := cfg.DataDir
	if dir == "" || !slices.Contains(st.volume, dir) {
		t.Errorf("PORTAL_DATA_DIR %q is not a VOLUME (%v)", dir, st.volume)
	}
	owned := false
	for _, c := range st.copies {
		f := strings.Fields(c)
		if len(f) > 0 && f[len(f)-1] == dir && slices.Contains(f, "--chown="+st.user) {
			owned = true
		}
	}
	if !owned {
		t.Errorf("no COPY --chown=%s makes %s the image user's: a fresh volume there would be root's (COPY lines %q)", st.user, dir, st.copies)
	}
	if !strings.Contains(st.health, `"/usr/local/bin/portal", "healthcheck"`) {
		t.Errorf("HEALTHCHECK %q does not run portal healthcheck", st.health)
	}
}

// TestCompose checks compose.yaml: the portal publishes every port it
// listens on, keeps its data directory on a volume, and Redis keeps an
// append-only file on one.
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	st := readDockerfile(t)
	portal := doc.Services["portal"]
	env := func(k string) string {
		if v, ok := portal.Environment[k]; ok {
			return v
		}
		return st.env[k]
	}
	var published []string
	for _, p := range portal.Ports {
		published = append(published, p[strings.LastIndex(p, ":")+1:])
	}
	for _, k := range []string{"PORTAL_ADDR", "PORTAL_GRPC_ADDR"} {
		_, port, err := net.SplitHostPort(env(k))
		if err != nil {
			t.Errorf("portal %s %q: %v", k, env(k), err)
			continue
		}
		if !slices.Contains(published, port) {
			t.Errorf("portal listens on %s (%s) but publishes %v", port, k, portal.Ports)
		}
	}
	if !slices.ContainsFunc(portal.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+env("PORTAL_DATA_DIR")) }) {
		t.Errorf("portal volumes %v: none at PORTAL_DATA_DIR %s", portal.Volumes, env("PORTAL_DATA_DIR"))
	}
	redis := doc.Services["redis"]
	cmd := strings.Join(redis.Command, " ")
	if !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis command %q: want --appendonly yes", cmd)
	}
	if !slices.ContainsFunc(redis.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
		t.Errorf("redis volumes %v: its append-only file is on no volume", redis.Volumes)
	}
	for _, v := range append(portal.Volumes, redis.Volumes...) {
		name, _, _ := strings.Cut(v, ":")
		if _, ok := doc.Volumes[name]; !ok {
			t.Errorf("volume %s is not declared", name)
		}
	}
}
