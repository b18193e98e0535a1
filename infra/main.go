// Command infra is the starlog CDK app: `cdk synth` / `cdk deploy` run it
// (see cdk.json at the repository root and docs/deploy.md).
package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/stack"
)

func main() {
	defer jsii.Close()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "starlog infra:", err)
		jsii.Close()
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	app := awscdk.NewApp(nil)
	if _, err := stack.Build(app, stack.BuildOptions{
		Root: root,
		Warn: func(msg string) { log.Warn(msg) },
	}); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

// repoRoot is the nearest directory at or above the working directory that
// holds cdk.json: relative binary paths in the configuration are relative
// to it, while the app itself runs in infra/.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cdk.json")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no cdk.json at or above %s", dir)
		}
	}
}
