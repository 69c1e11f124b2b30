// Package deploy holds the files for running sluice in production, and the
// tests that keep them true: Prometheus alert rules
// (prometheus/sluice-rules.yml), a Grafana dashboard (grafana/sluice.json)
// and a hardened systemd unit (systemd/sluice.service). The package has no
// code; it exists so that `go test ./...` checks the files with the tools
// that load them (promtool, systemd-analyze) and checks every metric they
// name against what /metrics really serves, so a renamed metric cannot
// leave a silent alert or an empty panel behind. docs/deploy.md says how
// to use each file.
package deploy
