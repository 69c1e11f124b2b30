package web

import "context"

// testRun is benchtrace.Run, which this package's tests cannot import
// (benchtrace imports web): runs_test.go, of package web_test, sets it.
var testRun func(context.Context, Params) (*Trace, error)

// SetTestRun sets the run the page's tests give Options.Run.
func SetTestRun(run func(context.Context, Params) (*Trace, error)) { testRun = run }
