// Package pgcluster finds the machine's PostgreSQL server binaries (installing
// them with apt-get when they are absent and the process is root) and runs a
// throwaway cluster from them: the local database of `inlet dev` and of the test
// harness. PostgreSQL refuses to run as root, so as root the cluster runs as the
// `postgres` user (created when missing) with its directories owned by it.
package pgcluster
