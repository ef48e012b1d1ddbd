// Package check holds the tests that keep deploy/ honest without a
// container runtime or a Kubernetes cluster: the kustomize overlays render
// and decode strictly into Kubernetes API types, and the compose file
// parses and uses only flags the binaries accept.
package check
