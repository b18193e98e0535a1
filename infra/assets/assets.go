// Package assets checks the binaries the stack packages before synthesis:
// the star binary and one Lambda bootstrap per auditor job. `make synth`
// writes a marked placeholder for a binary whose source does not exist yet;
// the app refuses placeholders unless told they are expected, so one can
// never reach a deploy unnoticed.
package assets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/starlog/starlog/infra/config"
)

// PlaceholderMarker is the text every placeholder binary contains near its
// start (the Makefile writes it).
const PlaceholderMarker = "STARLOG-PLACEHOLDER-BINARY"

// IsPlaceholder reports whether the file at path is a placeholder.
func IsPlaceholder(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return bytes.Contains(head[:n], []byte(PlaceholderMarker)), nil
}

// Report is what Check found.
type Report struct {
	// Placeholders are the binaries that are placeholders.
	Placeholders []string
}

// Check verifies that the star binary and every job's bootstrap exist as
// regular, non-empty files, and lists the placeholders among them. With
// allowPlaceholders false a placeholder is an error.
func Check(c config.Config, allowPlaceholders bool) (Report, error) {
	paths := []string{c.StarBinary}
	for _, job := range config.Jobs {
		paths = append(paths, c.LambdaBootstrap(job))
	}
	var rep Report
	var problems []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", p, err))
			continue
		case !fi.Mode().IsRegular():
			problems = append(problems, fmt.Sprintf("%s: not a regular file", p))
			continue
		case fi.Size() == 0:
			problems = append(problems, fmt.Sprintf("%s: empty", p))
			continue
		}
		ph, err := IsPlaceholder(p)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if ph {
			rep.Placeholders = append(rep.Placeholders, p)
			if !allowPlaceholders {
				problems = append(problems, fmt.Sprintf("%s: placeholder, not a real binary (build it, or set context %sallowPlaceholderBinaries=true for a synth that will not be deployed)", p, config.ContextPrefix))
			}
		}
	}
	if len(problems) > 0 {
		return rep, fmt.Errorf("binaries for the stack:\n  %s", strings.Join(problems, "\n  "))
	}
	return rep, nil
}
