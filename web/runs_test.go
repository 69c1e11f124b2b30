package web_test

import (
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/web/benchtrace"
)

// The page's tests run real bench runs, as cmd/sluice wires them.
func init() { web.SetTestRun(benchtrace.Run) }
