// Package tests holds Strata's cross-process tests: real binaries on
// loopback, killed with SIGKILL, paused with SIGSTOP, and checked against
// what they acknowledged. The harness package builds and drives the
// processes; each test file names the property it proves.
package tests
