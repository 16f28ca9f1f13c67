// Package sim replays a workload trace on a simulated cluster, driving the
// same policy code the daemon runs, with measured iteration times as ground
// truth and the fitted model as a marked fallback.
package sim
