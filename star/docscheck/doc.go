// Package docscheck holds a test, and nothing else: a number in docs/ (or
// README.md) that restates a default of the code names where the value
// lives in an HTML comment right after it, and the test evaluates that Go
// constant expression (go/parser and go/constant, no import of the named
// package) or Makefile default and fails when the two disagree. The
// convention is in docs/design.md, "Numbers that name a constant". No
// product package imports this one.
package docscheck
