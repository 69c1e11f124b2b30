// Package bulk is sluice's asynchronous endpoint for bulk work: single
// Messages requests in (POST /v1/bulk/messages), Message Batches upstream
// at half the price, results read back per request. A submission is
// stored durably before its 202; submissions of one credential are
// gathered by a window (count, bytes, age) into one upstream batch per
// flush; a poller stores each batch's results; a crash at any stage loses
// nothing and submits nothing twice. The store is SQLite in a data
// directory, or PostgreSQL shared by several replicas.
package bulk
