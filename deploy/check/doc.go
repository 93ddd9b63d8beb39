// Package check holds the tests of Sluice's deployment kit: the Helm chart
// (deploy/helm/sluice) linted and rendered with Helm's own library, as
// `helm lint` and `helm template` do, and the plain Kubernetes manifests
// (deploy/k8s) kept equal to the chart's rendering. It is a module of its
// own so that Helm and the Kubernetes libraries stay out of the portal's
// build; .ci/run tests it.
package check
