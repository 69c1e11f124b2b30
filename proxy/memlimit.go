package proxy

// memoryHeadroom is what the soft memory limit allows beyond the two byte
// budgets: the process's own heap (about 10 MB idle), waiting requests
// (about 5 KB each), connections, and room for garbage so that the
// collector does not run back to back.
const memoryHeadroom = 32 << 20

// SoftMemoryLimit is the Go runtime's soft memory limit that `sluice
// serve` sets when GOMEMLIMIT is not: the bodies sluice may hold
// (bodyBudget, BODY_BUDGET_MB), the stream events it may hold for slow
// readers, and memoryHeadroom. Without it the collector lets the heap grow
// to twice what was live at its last cycle (GOGC=100), so a full body
// budget plus the garbage of bodies read and refused took RSS to twice
// the budget; with it the collector runs as the heap nears the limit, and
// RSS stays near it as long as what is live fits (past it the collector
// works harder, but memory is not refused).
func SoftMemoryLimit(bodyBudget int64) int64 {
	return bodyBudget + streamBufferQuota + memoryHeadroom
}
