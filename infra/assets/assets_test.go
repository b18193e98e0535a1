package assets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/starlog/starlog/infra/config"
)

// layout writes a star binary and every bootstrap under dir; placeholder
// names the files (star or job) that get placeholder content.
func layout(t *testing.T, placeholder ...string) config.Config {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults().WithRoot(dir)
	write := func(path, name string) {
		body := "\x7fELF fake binary " + name
		for _, p := range placeholder {
			if p == name {
				body = "#!/bin/sh\n# " + PlaceholderMarker + ": not built yet\nexit 1\n"
			}
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(c.StarBinary, "star")
	for _, job := range config.Jobs {
		write(c.LambdaBootstrap(job), job)
	}
	return c
}

func TestCheckReal(t *testing.T) {
	rep, err := Check(layout(t), false)
	if err != nil || len(rep.Placeholders) != 0 {
		t.Fatalf("real binaries: %v %v", rep, err)
	}
}

func TestCheckPlaceholders(t *testing.T) {
	c := layout(t, "star", config.JobSettle)
	if _, err := Check(c, false); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("placeholders accepted without permission: %v", err)
	}
	rep, err := Check(c, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Placeholders) != 2 || rep.Placeholders[0] != c.StarBinary || rep.Placeholders[1] != c.LambdaBootstrap(config.JobSettle) {
		t.Errorf("placeholders %v", rep.Placeholders)
	}
}

func TestCheckMissingAndEmpty(t *testing.T) {
	c := layout(t)
	if err := os.Remove(c.LambdaBootstrap(config.JobTrim)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.StarBinary, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Check(c, true)
	if err == nil || !strings.Contains(err.Error(), "trim/bootstrap") || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("missing/empty binaries not reported: %v", err)
	}
	if err := os.Remove(c.StarBinary); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(c.StarBinary, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(c, true); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory accepted as binary: %v", err)
	}
}
