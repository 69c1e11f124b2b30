package sim

// CollectV1 reads a v1 SDK stream into its message, for the external
// tests of the cloud paths (sim_test), which cannot share this package's.
var CollectV1 = collectV1
